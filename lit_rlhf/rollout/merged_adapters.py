"""Sampling with the LoRA adapters merged: while the engine samples, each adapted linear layer is replaced in its
parent by a plain copy of its base layer whose weight is W + the active adapters' deltas (a new tensor).

An unmerged LoRA layer runs its base matmul plus the adapter's two small ones, a scale and an add, in peft's Python
forward, at every decoding step: on a small model, per-token overhead that generate() pays in every layer. Merged,
a decoding step runs what the base model alone runs. The policy's own tensors are never written (the merge is into
new tensors, the layers are put back after the call): the frozen base stays bit-exact for the reference, for
exact resume, and for the rollout producer's copies, which share it with the trainer.

rollout.merge_adapters: "auto" merges float32 (and float64) weights only, where the merged weight equals W + B A up
to float rounding; in bfloat16 or float16 the merge would round the adapter's contribution to the weight's
precision, so the sampler would draw from a slightly different policy than the one trained: "true" accepts that,
"false" never merges.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from peft.tuners.lora import Linear as LoraLinear

from lit_rlhf.errors import ConfigError
from lit_rlhf.models.lora_inputs import is_lora_linear
from lit_rlhf.rollout.weights import lora_variant, merged_lora_weight

EXACT_DTYPES = (torch.float32, torch.float64)


def check_merge_adapters(value: object) -> None:
    if value != "auto" and not isinstance(value, bool):
        raise ConfigError(f"rollout.merge_adapters={value!r} is not a choice; use auto (float32 weights only), "
                          f"true or false.")


def mergeable(layer: torch.nn.Module, any_dtype: bool) -> bool:
    """A plain LoRA linear layer (no DoRA or other variant) with adapters active and not merged, over an unsharded
    floating-point weight (of an exact dtype unless any_dtype)."""
    if not is_lora_linear(layer) or layer.disable_adapters or layer.merged:
        return False
    active = [name for name in layer.active_adapters if name in layer.lora_A]
    if not active or any(lora_variant(layer, name) for name in active):
        return False
    weight = layer.get_base_layer().weight
    if type(weight.data) is not torch.Tensor or not weight.is_floating_point():  # DTensor shards, quantized
        return False
    return any_dtype or weight.dtype in EXACT_DTYPES


def merged_copy(layer: LoraLinear) -> torch.nn.Module:
    """The base layer (nn.Linear, or transformers' Conv1D) as a new module whose weight is merged; its bias and
    everything else shared."""
    base = layer.get_base_layer()
    plain = copy.copy(base)
    plain._parameters = dict(base._parameters)
    plain._parameters["weight"] = torch.nn.Parameter(merged_lora_weight(layer), requires_grad=False)
    return plain


@contextmanager
def merged_adapters(model: torch.nn.Module, setting: str | bool) -> Iterator[None]:
    """Within: the mergeable LoRA layers of `model` replaced by merged copies."""
    if setting is False:
        yield
        return
    swaps = []  # (parent, attribute name, original layer)
    for parent in list(model.modules()):
        for name, child in parent.named_children():
            if mergeable(child, any_dtype=setting is True):
                swaps.append((parent, name, child))
    try:
        for parent, name, layer in swaps:
            parent._modules[name] = merged_copy(layer)
        yield
    finally:
        for parent, name, layer in swaps:
            parent._modules[name] = layer
