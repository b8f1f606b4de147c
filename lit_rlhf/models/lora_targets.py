"""Which layers LoRA may adapt. A LoRA layer adds B·A·x to its base layer's output, which is right only for a layer
whose forward is the linear map x·Wᵀ + b. Some models subclass nn.Linear for layers that do more: Llama 4's and
Phi-MoE's routers return a tuple (scores and logits), DeepSeek-V4's grouped projection multiplies per group. peft's
all-linear takes every nn.Linear, so on those models it wraps layers whose output it cannot add to and the first
forward fails inside peft. peft itself refuses others: on Mamba-based models (Mamba, Falcon-H1, Nemotron-H, ...) the
mixer's fused kernels read out_proj's weight directly, so an adapter there would be skipped on a GPU, and peft raises
for it, all-linear included. And a multimodal checkpoint (Gemma 3's) loads with a vision tower that text prompts
never reach: adapters there would train nothing, and stop trainer=ddp on unused parameters. All three kinds are left
out of the adapters, and the run says which."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info
from peft import LoraConfig
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import functional_call

from lit_rlhf.models.text_path import towers_beside_the_text_decoder

try:  # peft's check of the modules it will not adapt on Mamba-based models, a ValueError for each
    from peft.tuners.tuners_utils import _check_lora_target_modules_mamba as check_peft_accepts
except ImportError:  # a peft without it refuses nothing
    def check_peft_accepts(config: LoraConfig, model: torch.nn.Module, name: str) -> None:
        pass

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


def peft_refuses(model: torch.nn.Module, name: str) -> bool:
    """Whether peft refuses a LoRA adapter on the model's modules of this (last) name."""
    try:
        check_peft_accepts(LoraConfig(), model, name)
    except ValueError:
        return True
    return False


def layers_lora_cannot_adapt(model: torch.nn.Module) -> dict[str, str]:
    """The model's nn.Linear layers LoRA cannot adapt, each with why: outside the text decoder (a vision tower), its
    forward is not a linear map (checked once per class), or peft refuses its name on this model type (checked once
    per name)."""
    linear_maps: dict[type, bool] = {}
    refused: dict[str, bool] = {}
    towers = towers_beside_the_text_decoder(model)
    reasons = {}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        if tower := next((child for prefix, child in towers.items() if name.startswith(prefix)), None):
            reasons[name] = f"{tower}: outside the text decoder, which the prompts go through"
            continue
        kind, last_name = type(module), name.rsplit(".", 1)[-1]
        if kind not in linear_maps:
            linear_maps[kind] = computes_a_linear_map(module)
        if last_name not in refused:
            refused[last_name] = peft_refuses(model, last_name)
        if not linear_maps[kind]:
            reasons[name] = f"{kind.__name__}: its forward is not a linear map"
        elif refused[last_name]:
            model_type = getattr(getattr(model, "config", None), "model_type", "this")
            reasons[name] = f"{last_name}: peft adapts none on a {model_type} model"
    return reasons


def lora_config(model: torch.nn.Module, **lora: Any) -> LoraConfig:
    """peft's LoraConfig for adapters on model, with the layers LoRA cannot adapt left out (exclude_modules)."""
    reasons = layers_lora_cannot_adapt(model)
    if not reasons:
        return LoraConfig(**lora)
    left_out = list(reasons)
    line = (f"LoRA leaves out {len(left_out)} layers ({'; '.join(sorted(set(reasons.values())))}), e.g. "
            f"{left_out[0]}.")
    if line not in _said:
        _said.add(line)
        rank_zero_info(line)
    return LoraConfig(**lora, exclude_modules=left_out)
