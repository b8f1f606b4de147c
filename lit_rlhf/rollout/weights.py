"""The policy's current weights as an inference engine loads them: the base model's checkpoint names and layouts
(what `save_pretrained` writes and `from_pretrained` reads: a mixture of experts' stacked experts are one tensor per
expert again, transformers' own reverse of its loading conversions), LoRA merged in.

Only the tensors training changes are sent: with LoRA, each adapted layer's merged weight W + scale * B A (the
adapter itself stays in the trainer), plus modules_to_save and any trained bias; without LoRA, every trainable
parameter. The merge is computed into new tensors: the policy's own weights are never merged and unmerged in
place, which would accumulate rounding error in bfloat16 over thousands of syncs.
"""

from __future__ import annotations

import re

import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer, ParamWrapper

from lit_rlhf.models.lora_inputs import is_lora_linear

# peft's wrappers around a base module's tensors, removed to recover the checkpoint name
WRAPPER_PARTS = re.compile(r"\.base_layer(?=\.)|\.modules_to_save\.[^.]+(?=\.)")


def checkpoint_name(name: str) -> str:
    """'model.layers.0.q.base_layer.weight' -> 'model.layers.0.q.weight' (names under the base model)."""
    return WRAPPER_PARTS.sub("", name)


def adapted_name(name: str, layer: LoraLayer) -> str:
    """The name of the tensor an adapter layer adapts: its weight, or the parameter peft wraps (a mixture of experts'
    stacked experts, `experts.gate_up_proj`)."""
    return checkpoint_name(f"{name}.{layer.parameter_name if isinstance(layer, ParamWrapper) else 'weight'}")


@torch.no_grad()
def merged_lora_weight(layer: LoraLayer) -> torch.Tensor:
    """W + the active adapters' deltas, as a new tensor in W's dtype and layout."""
    weight = (layer.get_param() if isinstance(layer, ParamWrapper) else layer.get_base_layer().weight).detach()
    merged = weight
    for adapter in [] if layer.disable_adapters or layer.merged else layer.active_adapters:
        if adapter not in layer.lora_A:
            continue
        a, b = layer.lora_A[adapter].weight, layer.lora_B[adapter].weight  # r,in ; out,r
        if plain_linear_adapter(layer, adapter) and a.dtype == b.dtype == merged.dtype:
            merged = torch.addmm(merged, b, a, alpha=layer.scaling[adapter])  # W + scale * B A in one pass
        elif adapter in getattr(layer, "lora_variant", {}):  # DoRA's magnitude rescales W + B A: peft's own merge
            merged = layer.lora_variant[adapter].merge_safe(layer, adapter, merged.clone()).to(weight.dtype)
        else:
            merged = merged + layer.get_delta_weight(adapter).to(merged.dtype)
    return weight.clone() if merged is weight else merged


def lora_variant(layer: LoraLayer, adapter: str) -> bool:
    """Whether an adapter is DoRA or another LoRA variant (a forward of its own, not W + scale * B A)."""
    return adapter in getattr(layer, "lora_variant", {}) or bool(getattr(layer, "use_dora", {}).get(adapter, False))


def plain_linear_adapter(layer: LoraLayer, adapter: str) -> bool:
    """A vanilla LoRA adapter of a linear layer stored as out,in (no variant, no fan-in-fan-out)."""
    return is_lora_linear(layer) and not layer.fan_in_fan_out and not lora_variant(layer, adapter)


@torch.no_grad()
def every_weight(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    """{checkpoint name: tensor} of every parameter of the model, with LoRA merged: what an engine that may hold other
    weights (a server another run synced) takes first."""
    base = policy.get_base_model() if isinstance(policy, PeftModel) else policy
    weights = model_trained_weights(base)
    for name, param in base.named_parameters():
        if ".lora_" not in name and ".original_module." not in name:
            weights.setdefault(checkpoint_name(name), param.detach().clone())
    return in_checkpoint_layout(base, weights)


@torch.no_grad()
def trained_weights(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    """{checkpoint name: tensor} of every weight that training changes, with LoRA merged."""
    base = policy.get_base_model() if isinstance(policy, PeftModel) else policy
    return in_checkpoint_layout(base, model_trained_weights(base))


def model_trained_weights(base: torch.nn.Module) -> dict[str, torch.Tensor]:
    """{name in the model: tensor} of every weight that training changes, with LoRA merged."""
    weights = {}
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            weights[adapted_name(name, module)] = merged_lora_weight(module)
    for name, param in base.named_parameters():
        if not param.requires_grad or ".lora_" in name or ".original_module." in name:
            continue
        weights.setdefault(checkpoint_name(name), param.detach().clone())
    return weights


def in_checkpoint_layout(base: torch.nn.Module, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model's tensors under the names and in the layouts of its checkpoint files, as save_pretrained reverts
    transformers' loading conversions (renamed keys, stacked experts)."""
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # transformers 4 holds the tensors as it saves them
        return weights
    return dict(revert_weight_conversion(base, weights))


def trained_outside_lora(policy: torch.nn.Module) -> list[str]:
    """The trainable parameters a LoRA adapter file for an inference server does not carry (modules_to_save,
    trained biases): what adapter-only sync would leave behind."""
    return [checkpoint_name(name) for name, param in policy.named_parameters()
            if param.requires_grad and ".lora_" not in name]
