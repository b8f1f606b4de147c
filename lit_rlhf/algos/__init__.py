"""LightningModules: the shared RLHFModule and the algorithms built on it, and the components a module owns
(its KL controller and score transforms)."""

from lit_rlhf.algos.base import RLHFModule
from lit_rlhf.algos.distill import DistillationModule
from lit_rlhf.algos.grpo import GRPOModule
from lit_rlhf.algos.kl_controller import KLController, adaptive_kl_update
from lit_rlhf.algos.ppo import PPOModule
from lit_rlhf.algos.reinforce_pp import ReinforcePPModule
from lit_rlhf.algos.rloo import RLOOModule
from lit_rlhf.algos.rollout import Rollout
from lit_rlhf.algos.score_transforms import RewardNormalizer, ScoreContext, ScoreTransform
from lit_rlhf.noise import silence_known_noise

silence_known_noise()  # Lightning's messages a user of these modules cannot act on (lit_rlhf/noise.py)

__all__ = ["DistillationModule", "GRPOModule", "KLController", "PPOModule", "RLHFModule", "RLOOModule",
           "ReinforcePPModule", "RewardNormalizer", "Rollout", "ScoreContext", "ScoreTransform", "adaptive_kl_update"]
