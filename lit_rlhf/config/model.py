"""ModelConfig: the policy model (any AutoModelForCausalLM) and its LoRA adapters."""

import os
from dataclasses import dataclass
from typing import Any, Optional

from lit_rlhf.config.settings import build, setting
from lit_rlhf.config.validation import check_choice, check_flags
from lit_rlhf.errors import ConfigError

DTYPES = ("float32", "bfloat16", "float16", "auto")
DORA_UNDER_SHARDED_LOADING = (
    "model.lora.use_dora=true: DoRA's magnitudes are computed from the weights when its adapter is added, and "
    "sharded loading reads the weights only later; set trainer.strategy.sharded_loading=false, or train plain LoRA.")


@dataclass
class LoraSettings:
    r: int = setting(16, "LoRA rank")
    lora_alpha: int = setting(32, "LoRA scaling numerator (the update is scaled by lora_alpha / r), > 0")
    lora_dropout: float = setting(
        0.0, "dropout on the LoRA input; > 0 makes the ratio differ from 1 before any update, and with bfloat16 "
             "weights holds a float32 copy of each LoRA layer's input for the backward pass (0: its input as it is)")
    target_modules: Any = setting("all-linear", "modules that get adapters: all-linear, or a list of names; a "
                                                "multimodal checkpoint's vision tower and layers whose forward is "
                                                "not a linear map (Llama 4's routers) get none")
    use_rslora: bool = setting(False, "rank-stabilized LoRA (peft's use_rslora): the update is scaled by lora_alpha / "
                                      "sqrt(r)")
    use_dora: bool = setting(False, "DoRA (peft's use_dora): a trained magnitude per output row rescales W + B A; "
                                    "its layers run peft's own forward, slower than plain LoRA's, and are never "
                                    "merged for sampling")

    def __post_init__(self):
        if not isinstance(self.r, int) or isinstance(self.r, bool) or self.r < 1:
            raise ConfigError(f"model.lora.r={self.r!r} must be a whole number >= 1 (model.lora=null: full "
                              f"fine-tuning).")
        alpha = self.lora_alpha
        if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 < alpha < float("inf"):
            raise ConfigError(f"model.lora.lora_alpha={alpha!r} must be a finite number > 0: the update is scaled by "
                              f"lora_alpha / r, and at 0 the adapters never change the model (default: 32, twice "
                              f"r=16).")
        dropout = self.lora_dropout
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout < 1:
            raise ConfigError(f"model.lora.lora_dropout={dropout!r} must be a number in [0, 1).")
        modules = self.target_modules  # peft's own errors for these were tracebacks
        if isinstance(modules, (list, tuple)) and modules and all(isinstance(m, str) and m for m in modules):
            self.target_modules = list(modules)
        elif not isinstance(modules, str) or not modules:
            raise ConfigError(f"model.lora.target_modules={modules!r} must be all-linear or a non-empty list of module "
                              f"names (e.g. [query_key_value]); model.lora=null trains every weight instead.")
        for name in ("use_rslora", "use_dora"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"model.lora.{name}={getattr(self, name)!r} must be true or false.")


@dataclass
class ModelConfig:
    name_or_path: str = setting("???", "hub name or local directory of an AutoModelForCausalLM")
    tokenizer_name_or_path: Optional[str] = setting(None, "where the tokenizer lives (null: beside the weights)")
    dtype: str = setting("float32", "float32, bfloat16, float16 or auto")
    lora: Optional[LoraSettings] = setting(factory=LoraSettings, doc="LoRA adapters (null: full fine-tuning, with "
                                                                    "a frozen copy of the model as the reference)")
    adapter_path: Optional[str] = setting(None, "start from a trained peft adapter; a frozen copy of it is then the "
                                                "reference")
    trust_remote_code: bool = setting(False, "allow the model's own code from the Hub")
    gradient_checkpointing: bool = setting(False, "activation checkpointing (non-reentrant, works with LoRA)")
    reference_name_or_path: Optional[str] = setting(None, "with lora: null, load the frozen reference from here "
                                                          "instead of copying the model")
    cast_lm_head_to_fp32: bool = setting(False, "the output layer's weights and logits in float32 whatever "
                                                "model.dtype (TRL's name; ScaleRL), for the policy and its reference")
    attn_implementation: Optional[str] = setting(
        None, "transformers' attention implementation for the policy and its reference (TRL's name): eager, sdpa, "
              "flex_attention, flash_attention_2 (the flash-attn package), or a Hub kernel such as "
              "kernels-community/flash-attn3 (downloaded from the Hub); null: the model's default (sdpa where it has "
              "it)")

    def __post_init__(self):
        if self.name_or_path in (None, "???", ""):
            raise ConfigError("model.name_or_path is required: a hub name or a local model directory.")
        for key in ("name_or_path", "tokenizer_name_or_path", "adapter_path", "reference_name_or_path"):
            value = getattr(self, key)
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise ConfigError(not_a_name(f"model.{key}", value))
            setattr(self, key, None if value is None else os.fspath(value))  # a pathlib.Path: its string
        if self.attn_implementation is not None and not (isinstance(self.attn_implementation, str)
                                                         and self.attn_implementation.strip()):
            raise ConfigError(f"model.attn_implementation={self.attn_implementation!r} must be the name of an "
                              f"attention implementation (e.g. sdpa), or null for the model's default.")
        check_choice("dtype", self.dtype, DTYPES, prefix="model.")
        check_flags(self, "model.")  # trust_remote_code="false" from Python was true
        if isinstance(self.lora, dict):
            self.lora = build(LoraSettings, self.lora, "model.lora")


def model_config(spec: Any) -> ModelConfig:
    """A ModelConfig from a dict (Python, Hydra), a ModelConfig, or a hub name or folder (its name_or_path, the other
    settings their defaults); unknown keys are refused."""
    if isinstance(spec, (str, os.PathLike)):
        spec = {"name_or_path": spec}
    elif spec is not None and not isinstance(spec, (dict, ModelConfig)):
        raise ConfigError(not_a_name("model", spec))
    return build(ModelConfig, spec, "model")


def not_a_name(key: str, value: Any) -> str:
    """The line for a loaded model (or any object) where its name or folder belongs: the checkpoints record names, and
    the weights load in configure_model (under trainer=fsdp2, sharded as they load)."""
    name = getattr(value, "name_or_path", None)
    return (f"{key} is a {type(value).__name__}, not a name or a folder; pass the name or folder it was loaded from"
            f"{f' ({name!r})' if isinstance(name, str) and name else ''} (a model you changed: save_pretrained, then "
            f"that folder).")
