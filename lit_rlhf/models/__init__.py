"""Policy loading (HF causal LM + peft LoRA), the reference, tokenizers and rewards."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_rlhf.lazy_exports import lazy_exports

_EXPORTS = {"Reference": "lit_rlhf.models.policy", "load_policy": "lit_rlhf.models.policy",
            "WeightedSum": "lit_rlhf.models.reward_set", "reward_name": "lit_rlhf.models.reward_set",
            "Reward": "lit_rlhf.models.rewards", "SequenceClassifierReward": "lit_rlhf.models.rewards",
            "VaderSentiment": "lit_rlhf.models.rewards", "call_reward": "lit_rlhf.models.rewards",
            "load_reward": "lit_rlhf.models.rewards", "ensure_pad_token": "lit_rlhf.models.tokenizer",
            "load_tokenizer": "lit_rlhf.models.tokenizer"}
__all__ = ["Reference", "Reward", "SequenceClassifierReward", "VaderSentiment", "WeightedSum", "call_reward",
           "ensure_pad_token", "load_policy", "load_reward", "load_tokenizer", "reward_name"]  # = _EXPORTS

if TYPE_CHECKING:
    from lit_rlhf.models.policy import Reference, load_policy
    from lit_rlhf.models.reward_set import WeightedSum, reward_name
    from lit_rlhf.models.rewards import Reward, SequenceClassifierReward, VaderSentiment, call_reward, load_reward
    from lit_rlhf.models.tokenizer import ensure_pad_token, load_tokenizer

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
