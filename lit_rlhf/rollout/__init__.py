"""Rollout engines: how responses are sampled (see engine.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_rlhf.lazy_exports import lazy_exports

_EXPORTS = {"RolloutEngine": "lit_rlhf.rollout.engine", "Samples": "lit_rlhf.rollout.engine",
            "repeat_prompts": "lit_rlhf.rollout.engine", "HFEngine": "lit_rlhf.rollout.hf",
            "VLLMEngine": "lit_rlhf.rollout.vllm_engine", "VLLMServerEngine": "lit_rlhf.rollout.vllm_server"}
__all__ = ["HFEngine", "RolloutEngine", "Samples", "VLLMEngine", "VLLMServerEngine", "repeat_prompts"]  # = _EXPORTS

if TYPE_CHECKING:
    from lit_rlhf.rollout.engine import RolloutEngine, Samples, repeat_prompts
    from lit_rlhf.rollout.hf import HFEngine
    from lit_rlhf.rollout.vllm_engine import VLLMEngine
    from lit_rlhf.rollout.vllm_server import VLLMServerEngine


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
