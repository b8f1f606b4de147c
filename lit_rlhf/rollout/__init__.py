"""Rollout engines: how responses are sampled (see engine.py)."""

from lit_rlhf.rollout.engine import RolloutEngine, Samples, repeat_prompts
from lit_rlhf.rollout.hf import HFEngine
from lit_rlhf.rollout.vllm_engine import VLLMEngine

__all__ = ["HFEngine", "RolloutEngine", "Samples", "VLLMEngine", "repeat_prompts"]
