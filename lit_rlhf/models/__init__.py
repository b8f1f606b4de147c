"""Policy loading (HF causal LM + peft LoRA), the reference, tokenizers and rewards."""

from lit_rlhf.models.policy import Reference, load_policy
from lit_rlhf.models.reward_set import WeightedSum, reward_name
from lit_rlhf.models.rewards import Reward, SequenceClassifierReward, VaderSentiment, call_reward, load_reward
from lit_rlhf.models.tokenizer import ensure_pad_token, load_tokenizer

__all__ = ["Reference", "Reward", "SequenceClassifierReward", "VaderSentiment", "WeightedSum", "call_reward",
           "ensure_pad_token", "load_policy", "load_reward", "load_tokenizer", "reward_name"]
