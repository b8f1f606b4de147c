"""Prompt data: the PromptDataModule, collate, and the embedded default's prompts and corpus."""

from lit_rlhf.data.datamodule import PromptDataModule, collate_left_padded, local_size
from lit_rlhf.data.sources import BUNDLED, load_prompt_texts
from lit_rlhf.data.stream import PromptStream

__all__ = ["BUNDLED", "PromptDataModule", "PromptStream", "collate_left_padded", "load_prompt_texts", "local_size"]
