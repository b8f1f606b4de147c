"""LoRA in float32 over lower-precision weights, without holding a float32 copy of each layer's input.

peft keeps the adapters in float32 over bfloat16 (or float16) weights and casts a LoRA layer's input to float32 before
the adapter's first product (lora_A), which saves that float32 copy for its backward pass: at an RL update's peak
those copies are the largest thing held (docs/performance.md, "What the update's peak holds"). Here lora_A computes
the same product, A (x as float32), but saves x in its own dtype and casts it again in the backward pass, where
autograd takes the gradients of that same product: the values and gradients of peft's cast-then-product, half the
bytes held per layer with bfloat16 weights (tests/models/test_lora_inputs.py).

Installed where that is exact: on peft's LoRA `Linear` layers whose adapters are plain (no DoRA or other variant)
and drop nothing out of their input (lora_dropout 0); such a layer leaves the cast to lora_A. Where the input already
has the adapter's dtype (float32 weights) nothing changes.
"""

from __future__ import annotations

import torch
from peft.tuners.lora.layer import Linear as LoraLinear


class _CastInputLinear(torch.autograd.Function):
    """F.linear(x.to(weight.dtype), weight, bias) that saves x, not its cast copy."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight, bias)
        return torch.nn.functional.linear(x.to(weight.dtype), weight, bias)

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, bias = ctx.saved_tensors
        needs = ctx.needs_input_grad
        with torch.enable_grad():  # the forward's product again, for autograd's own gradients of it
            cast = x.detach().to(weight.dtype).requires_grad_(needs[0])
            inputs = (cast, weight.detach().requires_grad_(needs[1]),
                      None if bias is None else bias.detach().requires_grad_(needs[2]))
            output = torch.nn.functional.linear(*inputs)
        wanted = [i for i, (tensor, need) in enumerate(zip(inputs, needs, strict=True)) if tensor is not None and need]
        grads = dict(zip(wanted, torch.autograd.grad(output, [inputs[i] for i in wanted], grad_output), strict=True))
        grad_x = grads.get(0)
        return (None if grad_x is None else grad_x.to(x.dtype)), grads.get(1), grads.get(2)


class CastInputLinear(torch.nn.Linear):
    """lora_A: a Linear that takes its input in any dtype and casts it to the weight's, holding the input as given."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == self.weight.dtype or not torch.is_grad_enabled() or hasattr(self.weight, "ds_id"):
            # nothing cast, nothing saved (no grad), or ZeRO-3's partitioned weights (its own linear): peft's way
            return torch.nn.functional.linear(x.to(self.weight.dtype), self.weight, self.bias)
        return _CastInputLinear.apply(x, self.weight, self.bias)


class HeldInputLoraLinear(LoraLinear):
    """peft's LoRA Linear that leaves the input's cast to lora_A while every adapter of the layer is plain (its
    lora_A a CastInputLinear, no dropout, no variant); an adapter added later that is not gets peft's cast back."""

    def _cast_input_dtype(self, x, dtype):
        adapters = tuple(self.lora_A._modules)  # the ModuleDict's names, without its Python iterator
        if getattr(self, "_checked_adapters", None) != adapters:  # checked again once the adapters change
            self._checked_adapters = adapters
            self._all_plain = all(plain_adapter(self, name, CastInputLinear) for name in adapters)
        return x if self._all_plain or x is None else super()._cast_input_dtype(x, dtype)


def plain_adapter(layer: LoraLinear, name: str, *linear_types: type) -> bool:
    """Whether the layer's adapter `name` is a product of lora_A of one of linear_types, with no dropout and no
    variant (DoRA, ...) between the input and it."""
    return (type(layer.lora_A[name]) in linear_types and isinstance(layer.lora_dropout[name], torch.nn.Identity)
            and name not in getattr(layer, "lora_variant", {}) and not getattr(layer, "use_dora", {}).get(name))


def is_lora_linear(layer: torch.nn.Module) -> bool:
    """peft's LoRA Linear itself, as peft builds it or holding its inputs (not a quantized or other layer type)."""
    return type(layer) in (LoraLinear, HeldInputLoraLinear)


def hold_lora_inputs_in_their_dtype(model: torch.nn.Module) -> int:
    """Install CastInputLinear on model's LoRA layers whose adapters are all plain (module docstring); call again
    after adding an adapter. -> the LoRA layers that hold their inputs in their dtype"""
    held = 0
    for layer in model.modules():
        if not is_lora_linear(layer) or not layer.lora_A:
            continue
        if all(plain_adapter(layer, name, torch.nn.Linear, CastInputLinear) for name in layer.lora_A):
            for name in layer.lora_A:
                layer.lora_A[name].__class__ = CastInputLinear
            layer.__class__ = HeldInputLoraLinear
            held += 1
    return held
