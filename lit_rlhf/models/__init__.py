"""Policy loading (HF causal LM + peft LoRA), the reference, tokenizers and rewards."""

from lit_rlhf.models.policy import Reference, load_policy
from lit_rlhf.models.rewards import Reward, SequenceClassifierReward, VaderSentiment, WeightedSum, load_reward
from lit_rlhf.models.tokenizer import ensure_pad_token, load_tokenizer

__all__ = ["Reference", "Reward", "SequenceClassifierReward", "VaderSentiment", "WeightedSum",
           "ensure_pad_token", "load_policy", "load_reward", "load_tokenizer"]
