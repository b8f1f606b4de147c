"""Which layers LoRA may adapt. A LoRA layer adds B·A·x to its base layer's output, which is right only for a layer
whose forward is the linear map x·Wᵀ + b. Some models subclass nn.Linear for layers that do more: Llama 4's and
Phi-MoE's routers return a tuple (scores and logits), DeepSeek-V4's grouped projection multiplies per group. peft's
all-linear takes every nn.Linear, so on those models it wraps layers whose output it cannot add to and the first
forward fails inside peft. These layers are left out of the adapters, and the run says which."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info
from peft import LoraConfig
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import functional_call

# rows of the probe's input: more than one, so a layer that folds its rows into groups shows a different shape
PROBE_ROWS = 3
_said: set[str] = set()  # a second adapter on the same model (algo.critic=adapter) does not say it again


def computes_a_linear_map(layer: torch.nn.Linear) -> bool:
    """Whether the layer's forward gives one tensor of a linear map's shape. Run on fake CPU tensors (shapes and
    dtypes, no memory, no arithmetic), so a layer of any size, or still on the meta device under sharded loading,
    costs nothing, and a forward that sets autocast for its input's device (Float32OutputLayer) runs as on a CPU."""
    if type(layer).forward is torch.nn.Linear.forward:
        return True
    with FakeTensorMode():
        placeholders = {name: torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
                        for name, tensor in [*layer.named_parameters(), *layer.named_buffers()]}
        probe = torch.empty(PROBE_ROWS, layer.in_features, dtype=layer.weight.dtype, device="cpu")
        try:
            output = functional_call(layer, placeholders, (probe,))
        except Exception:  # noqa: BLE001 - a forward that cannot take a plain batch of rows is no linear map
            return False
    return isinstance(output, torch.Tensor) and output.shape == (PROBE_ROWS, layer.out_features)


def layers_lora_cannot_adapt(model: torch.nn.Module) -> list[str]:
    """Names of the model's nn.Linear layers whose forward is not a linear map, checked once per class."""
    verdicts: dict[type, bool] = {}
    names = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            kind = type(module)
            if kind not in verdicts:
                verdicts[kind] = computes_a_linear_map(module)
            if not verdicts[kind]:
                names.append(name)
    return names


def lora_config(model: torch.nn.Module, **lora: Any) -> LoraConfig:
    """peft's LoraConfig for adapters on model, with the layers LoRA cannot adapt left out (exclude_modules)."""
    left_out = layers_lora_cannot_adapt(model)
    if not left_out:
        return LoraConfig(**lora)
    kinds = sorted({type(model.get_submodule(name)).__name__ for name in left_out})
    line = (f"LoRA leaves out {len(left_out)} layers ({', '.join(kinds)}, e.g. {left_out[0]}): they subclass "
            f"nn.Linear but their forward is not a linear map, so an adapter's output cannot be added to theirs.")
    if line not in _said:
        _said.add(line)
        rank_zero_info(line)
    return LoraConfig(**lora, exclude_modules=left_out)
