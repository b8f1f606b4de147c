"""Rollout engines: how responses are sampled (see engine.py)."""

from lit_rlhf.rollout.engine import RolloutEngine, Samples, repeat_prompts
from lit_rlhf.rollout.hf import HFEngine

__all__ = ["HFEngine", "RolloutEngine", "Samples", "repeat_prompts"]
