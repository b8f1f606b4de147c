"""Policy loading (HF causal LM + peft LoRA), the reference, tokenizers, forwards and export. Rewards live in
lit_rlhf.rewards, teachers in lit_rlhf.teachers (their old names here warn for one release: lit_rlhf.lazy_exports)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_rlhf.lazy_exports import lazy_exports

_EXPORTS = {"Reference": "lit_rlhf.models.policy", "load_policy": "lit_rlhf.models.policy",
            "ensure_pad_token": "lit_rlhf.models.tokenizer", "load_tokenizer": "lit_rlhf.models.tokenizer",
            "load_model_tokenizer": "lit_rlhf.models.tokenizer"}
__all__ = ["Reference", "ensure_pad_token", "load_model_tokenizer", "load_policy", "load_tokenizer"]  # = _EXPORTS

if TYPE_CHECKING:
    from lit_rlhf.models.policy import Reference, load_policy
    from lit_rlhf.models.tokenizer import ensure_pad_token, load_model_tokenizer, load_tokenizer

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
