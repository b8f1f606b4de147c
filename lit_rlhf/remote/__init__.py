"""Rewards that live elsewhere: HTTPReward (a client of the reward server's schema) and the server itself
(lit_rlhf.remote.server, `python -m lit_rlhf.serve`)."""

from lit_rlhf.remote.client import HTTPReward
from lit_rlhf.remote.schema import RewardServiceError

__all__ = ["HTTPReward", "RewardServiceError"]
