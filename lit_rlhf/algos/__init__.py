"""LightningModules: the shared RLHFModule and the algorithms built on it. The parts of their step (the Rollout
record, the KL controller, score transforms) live in lit_rlhf.step; their old names here warn for one release."""

from lit_rlhf.algos.base import RLHFModule
from lit_rlhf.algos.distill import DistillationModule
from lit_rlhf.algos.grpo import GRPOModule
from lit_rlhf.algos.ppo import PPOModule
from lit_rlhf.algos.reinforce_pp import ReinforcePPModule
from lit_rlhf.algos.rloo import RLOOModule
from lit_rlhf.lazy_exports import lazy_exports
from lit_rlhf.noise import silence_known_noise

silence_known_noise()  # Lightning's messages a user of these modules cannot act on (lit_rlhf/noise.py)

__all__ = ["DistillationModule", "GRPOModule", "PPOModule", "RLHFModule", "RLOOModule", "ReinforcePPModule"]

__getattr__, __dir__ = lazy_exports(__name__, {}, globals())
