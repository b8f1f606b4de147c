"""Rewards: any callable (prompts, completions, **columns) -> scores of shape (N,) (lit_rlhf.rewards.protocol).

- VaderSentiment: the VADER analyzer, offline (the default run's reward).
- SequenceClassifierReward: a Hugging Face sequence-classification reward model.
- WeightedSum: several named rewards with weights, each logged beside the total.
- HTTPReward: scores from a reward server (`python -m lit_rlhf.serve`, or any server of lit_rlhf.remote.schema).
- LLMJudge, LLMPairwiseJudge: a generative judge (an OpenAI-compatible endpoint or a local model).
Task rewards (arithmetic, math_verify) live with their tasks (lit_rlhf.tasks), the environment's in lit_rlhf.envs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_rlhf.lazy_exports import lazy_exports

_EXPORTS = {"Reward": "lit_rlhf.rewards.protocol", "call_reward": "lit_rlhf.rewards.protocol",
            "load_reward": "lit_rlhf.rewards.protocol", "VaderSentiment": "lit_rlhf.rewards.vader",
            "SequenceClassifierReward": "lit_rlhf.rewards.reward_model", "WeightedSum": "lit_rlhf.rewards.weighted_sum",
            "reward_name": "lit_rlhf.rewards.weighted_sum", "HTTPReward": "lit_rlhf.rewards.http",
            "LLMJudge": "lit_rlhf.rewards.judge", "LLMPairwiseJudge": "lit_rlhf.rewards.judge",
            "parse_judgement": "lit_rlhf.rewards.judge", "parse_verdict": "lit_rlhf.rewards.judge"}
__all__ = ["HTTPReward", "LLMJudge", "LLMPairwiseJudge", "Reward", "SequenceClassifierReward", "VaderSentiment",
           "WeightedSum", "call_reward", "load_reward", "parse_judgement", "parse_verdict",
           "reward_name"]  # = _EXPORTS

if TYPE_CHECKING:
    from lit_rlhf.rewards.http import HTTPReward
    from lit_rlhf.rewards.judge import LLMJudge, LLMPairwiseJudge, parse_judgement, parse_verdict
    from lit_rlhf.rewards.protocol import Reward, call_reward, load_reward
    from lit_rlhf.rewards.reward_model import SequenceClassifierReward
    from lit_rlhf.rewards.vader import VaderSentiment
    from lit_rlhf.rewards.weighted_sum import WeightedSum, reward_name

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
