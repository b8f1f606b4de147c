"""DataConfig: where the prompts come from and how they are batched (PromptDataModule)."""

from dataclasses import dataclass
from typing import Optional

from lit_rlhf.config.settings import setting
from lit_rlhf.errors import ConfigError


@dataclass
class DataConfig:
    tokenizer: str = setting("???", "the policy's tokenizer (the CLI sets model.tokenizer_name_or_path)")
    dataset: Optional[str] = setting("sentiment", "`sentiment` (bundled), a .jsonl/.json/.csv/.parquet path, or a "
                                                  "hub dataset name")
    prompt_column: str = setting("prompt", "the column holding the prompts")
    split: str = setting("train", "for hub datasets")
    subset: Optional[str] = setting(None, "hub dataset configuration name")
    batch_size: int = setting(8, "prompts per RL step over all ranks (B x world size); N = batch_size x K")
    max_prompt_length: int = setting(64, "longer prompts lose their beginning (counted, warned once)")
    apply_chat_template: bool = setting(False, "wrap each prompt as a user turn with the tokenizer's chat template")
    num_eval_prompts: int = setting(16, "fixed held-out prompts for validation and samples")
    eval_batch_size: int = setting(16, "held-out prompts per validation batch")
    seed: int = setting(0, "the order of the prompts and the held-out split")
    trust_remote_code: bool = setting(False, "allow the tokenizer's own code from the Hub")

    def __post_init__(self):
        for name in ("batch_size", "max_prompt_length", "eval_batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"data.{name}={value!r} must be a whole number >= 1.")
        if self.tokenizer in (None, "???", ""):
            raise ConfigError("data.tokenizer is required: the policy's tokenizer (hub name or directory).")
