"""Rewards that live elsewhere: HTTPReward (a client of the reward server's schema; the server is
`python -m lit_rlhf.serve`) and LLMJudge (a generative judge, endpoint or local)."""

from lit_rlhf.remote.client import HTTPReward
from lit_rlhf.remote.judge import LLMJudge, LLMPairwiseJudge, parse_judgement, parse_verdict
from lit_rlhf.remote.schema import RewardServiceError

__all__ = ["HTTPReward", "LLMJudge", "LLMPairwiseJudge", "RewardServiceError", "parse_judgement", "parse_verdict"]
