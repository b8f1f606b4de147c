"""The policy (an AutoModelForCausalLM, with LoRA through peft) and its reference.

Three kinds of reference, chosen from the model spec:
- LoRA (default): the policy with adapters disabled. One copy of the weights.
- adapter_path set: the run starts from a trained adapter, so "adapters off" would be the wrong
  model; a frozen copy of that adapter, loaded beside the trainable one, is the reference.
- lora: null (full fine-tuning): a frozen copy of the initial model, or of the model at
  reference_name_or_path (e.g. an exported policy evaluated against the model it started from).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, PreTrainedTokenizerBase

from lit_rlhf.config.model import DORA_UNDER_SHARDED_LOADING
from lit_rlhf.distributed.meta_loading import empty_model, is_empty
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.loading import (
    TORCH_LAYERS,
    attention_checked,
    from_pretrained,
    load_report_held,
    resolve_dtype,
    weights_started_at_random,
)
from lit_rlhf.models.lora_inputs import hold_lora_inputs_in_their_dtype
from lit_rlhf.models.lora_targets import lora_config
from lit_rlhf.models.output_layer import (
    FLOAT32_HEAD_UNDER_FSDP2,
    cast_output_layer_to_float32,
    check_float32_output_layer,
)
from lit_rlhf.models.peft_warnings import get_peft_model_checked, peft_reads_deprecated_alias
from lit_rlhf.models.text_path import freeze_towers_beside_the_text_decoder, mark_prompts_as_text

TRAINABLE_ADAPTER, REFERENCE_ADAPTER = "default", "reference"


class Reference:
    """Gives the module that computes reference logprobs, for the length of a `with` block."""

    def __init__(self, policy: torch.nn.Module, frozen_copy: torch.nn.Module | None = None):
        self.policy = policy
        self.frozen_copy = frozen_copy

    @property
    def kind(self) -> str:
        if self.frozen_copy is not None:
            return "frozen_copy"
        if REFERENCE_ADAPTER in getattr(self.policy, "peft_config", {}):
            return "reference_adapter"
        return "adapters_disabled"

    @contextmanager
    def active(self) -> Iterator[torch.nn.Module]:
        kind = self.kind
        if kind == "frozen_copy":
            yield self.frozen_copy
        elif kind == "adapters_disabled":
            with self.policy.disable_adapter():
                yield self.policy
        else:
            self.policy.set_adapter(REFERENCE_ADAPTER, inference_mode=True)
            try:
                yield self.policy
            finally:
                self.policy.set_adapter(TRAINABLE_ADAPTER)  # re-enables grads of the trained adapter only


def linear_module_names(model: torch.nn.Module) -> list[str]:
    """The distinct last names of a model's linear layers (what LoRA's target_modules match)."""
    names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    return sorted(names - {"lm_head", "embed_out"})


def with_lora(model: torch.nn.Module, lora: dict[str, Any], task_type: str, name_or_path: str) -> torch.nn.Module:
    """model wrapped with LoRA adapters (peft), their layers holding their inputs in the weights' dtype
    (models/lora_inputs.py); target modules that match nothing are one line naming some that do."""
    if lora.get("use_dora") and is_empty(model):
        raise ConfigError(DORA_UNDER_SHARDED_LOADING)
    config = lora_config(model, task_type=task_type, **lora)
    try:
        adapted = get_peft_model_checked(model, config)
    except ValueError as err:  # peft's NoMatchingPeftModuleError
        if config.exclude_modules and ("All modules were excluded" in str(err) or
                                       "No modules were targeted" in str(err)):
            left_out = sorted(config.exclude_modules)
            raise ConfigError(f"model.lora.target_modules={lora.get('target_modules')!r} names only layers LoRA "
                              f"leaves out on {name_or_path} (e.g. {left_out[0]}, said above); name others, e.g. "
                              f"{linear_module_names(model)[:4]}, or use 'all-linear'.") from err
        if "not found in the base model" not in str(err):
            raise
        raise ConfigError(f"model.lora.target_modules={lora.get('target_modules')!r} matches no module of "
                          f"{name_or_path}; use 'all-linear' or names of its linear layers, e.g. "
                          f"{linear_module_names(model)[:4]}.") from err
    hold_lora_inputs_in_their_dtype(adapted)
    return adapted


def load_policy(
    name_or_path: str,
    tokenizer: PreTrainedTokenizerBase,
    dtype: str | None = "float32",
    lora: dict[str, Any] | None = None,
    adapter_path: str | None = None,
    trust_remote_code: bool = False,
    gradient_checkpointing: bool = False,
    reference_name_or_path: str | None = None,
    empty: bool = False,
    cast_lm_head_to_fp32: bool = False,
    attn_implementation: str | None = None,
) -> tuple[torch.nn.Module, Reference]:
    """Loads the causal LM and wraps it for training; returns (policy, reference). empty: built on the meta device,
    its weights read after sharding (lit_rlhf/distributed/meta_loading.py); adapters are real from the start.
    cast_lm_head_to_fp32: the policy's and the reference's output layer in float32 (Float32OutputLayer).
    attn_implementation: transformers' attention implementation for both (None: the model's default)."""
    if reference_name_or_path is not None and (lora is not None or adapter_path is not None):
        raise ConfigError(f"model.reference_name_or_path={reference_name_or_path!r} needs model.lora=null: with LoRA "
                          f"the reference is the policy with adapters disabled.")
    if cast_lm_head_to_fp32 and empty:
        raise ConfigError(FLOAT32_HEAD_UNDER_FSDP2)
    model = load_causal_lm(name_or_path, "model.name_or_path", dtype, trust_remote_code, empty, attn_implementation)
    fit_embeddings(model, tokenizer, "model.name_or_path")
    if cast_lm_head_to_fp32:  # before the copy a full fine-tune's reference is made of
        cast_output_layer_to_float32(model, "model.name_or_path")
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if gradient_checkpointing and hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.20
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    elif gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    if adapter_path is not None:
        if Path(adapter_path).exists() and not (Path(adapter_path) / "adapter_config.json").is_file():
            raise ConfigError(f"model.adapter_path={adapter_path!r} holds no adapter_config.json; give a directory "
                              f"written by peft's save_pretrained (python -m lit_rlhf.export CKPT OUT --adapter-only).")
        with peft_reads_deprecated_alias():
            policy = from_pretrained(
                lambda path: PeftModel.from_pretrained(model, path, adapter_name=TRAINABLE_ADAPTER, is_trainable=True),
                adapter_path, "adapter", cache_first=False, errors=(OSError, ValueError), key="model.adapter_path",
            )
            policy.load_adapter(adapter_path, adapter_name=REFERENCE_ADAPTER, is_trainable=False)
        policy.set_adapter(TRAINABLE_ADAPTER)
        hold_lora_inputs_in_their_dtype(policy)
        check_float32_output_layer(policy)
        return policy, Reference(policy)
    if lora is not None:
        policy = with_lora(model, lora, "CAUSAL_LM", name_or_path)
        check_float32_output_layer(policy)
        return policy, Reference(policy)
    freeze_towers_beside_the_text_decoder(model)
    if reference_name_or_path is None and not empty:
        frozen = copy.deepcopy(model)
    elif reference_name_or_path is None:  # placeholders: a deep copy would allocate them whole
        frozen = load_causal_lm(name_or_path, "model.name_or_path", dtype, trust_remote_code, empty,
                                attn_implementation)
        fit_embeddings(frozen, tokenizer, "model.name_or_path")
        frozen.generation_config.pad_token_id = tokenizer.pad_token_id
    else:
        frozen = load_causal_lm(reference_name_or_path, "model.reference_name_or_path", dtype, trust_remote_code,
                                empty, attn_implementation)
        fit_embeddings(frozen, tokenizer, "model.reference_name_or_path")
        if cast_lm_head_to_fp32:
            cast_output_layer_to_float32(frozen, "model.reference_name_or_path")
    frozen.requires_grad_(False).eval()
    return model, Reference(model, frozen_copy=frozen)


def load_causal_lm(name_or_path: str, key: str, dtype: str | None, trust_remote_code: bool, empty: bool,
                   attn_implementation: str | None = None):
    """from_pretrained, or (empty) the model on the meta device, tagged with the file keys of its weights; a
    multimodal model's text prompts marked as text. attn_implementation: None keeps the model's default."""
    with attention_checked(attn_implementation, key, name_or_path) as attention:
        if empty:
            model = empty_model(AutoModelForCausalLM, name_or_path, key, resolve_dtype(dtype), trust_remote_code,
                                **attention)
        else:
            with load_report_held():  # said below when it matters
                model, loading = from_pretrained(
                    AutoModelForCausalLM.from_pretrained, name_or_path, "model", key=key, dtype=resolve_dtype(dtype),
                    trust_remote_code=trust_remote_code, output_loading_info=True, **TORCH_LAYERS, **attention)
            if line := weights_started_at_random(model, loading["missing_keys"], key, name_or_path):
                raise ConfigError(line)
    mark_prompts_as_text(model)
    return model


def fit_embeddings(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, key: str) -> None:
    """Room in the embeddings for a pad token the tokenizer added (new rows, initialised by transformers)."""
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) <= rows:
        return
    if is_empty(model):
        raise ConfigError(f"{key}: the tokenizer adds a pad token ({len(tokenizer)} tokens, the model has {rows} "
                          f"embeddings), which sharded loading cannot read from the model's files; set "
                          f"trainer.strategy.sharded_loading=false, or use a model whose vocabulary has a pad token.")
    model.resize_token_embeddings(len(tokenizer))
