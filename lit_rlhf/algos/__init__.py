"""LightningModules: the shared RLHFModule and the algorithms built on it."""

from lit_rlhf.algos.base import RLHFModule
from lit_rlhf.algos.ppo import PPOModule
from lit_rlhf.algos.rloo import RLOOModule
from lit_rlhf.algos.rollout import Rollout

__all__ = ["PPOModule", "RLHFModule", "RLOOModule", "Rollout"]
