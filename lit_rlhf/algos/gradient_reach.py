"""Trained parameters the loss never reaches. A model may read a layer's weight without calling the layer (Mamba's
mixer multiplies by dt_proj's weight itself, and its fused kernels take x_proj's and out_proj's too), so a LoRA
adapter on that layer never enters the forward: it trains nothing, and under trainer=ddp the next step stops on
DDP's unused parameters. After the fit's first backward, such parameters are one warning naming their layers."""

from __future__ import annotations

import torch
from lightning.pytorch.strategies import DeepSpeedStrategy

from lit_rlhf.config.validation import warn_once

PARAMETER_SUFFIXES = (".weight", ".bias", ".lora_A.default", ".lora_B.default", ".lora_magnitude_vector.default",
                      ".base_layer")


def layer_of(parameter_name: str) -> str:
    """The layer a parameter belongs to: its name without the parameter's and the adapter's parts."""
    name = parameter_name.removeprefix("policy.").removeprefix("base_model.model.")
    changed = True
    while changed:
        changed = False
        for suffix in PARAMETER_SUFFIXES:
            if name.endswith(suffix):
                name, changed = name.removesuffix(suffix), True
    return name


def unreached_layers(module: torch.nn.Module) -> list[str]:
    """Layers of trained parameters without a gradient while others have one (a backward that reached nothing, e.g.
    a step whose rollout was all filtered out, says nothing)."""
    trained = [(name, param) for name, param in module.named_parameters() if param.requires_grad]
    if not any(param.grad is not None for _, param in trained):
        return []
    return list(dict.fromkeys(layer_of(name) for name, param in trained if param.grad is None))


class ChecksGradientReach:
    """A LightningModule mixin: after the fit's first backward, trained parameters no gradient reached are one
    warning naming their layers (DeepSpeed holds gradients outside param.grad: not read there)."""

    _gradient_reach_checked = False

    def on_after_backward(self) -> None:
        if self._gradient_reach_checked:
            return
        self._gradient_reach_checked = True
        trainer = getattr(self, "_trainer", None)
        if trainer is None or not isinstance(trainer.strategy, DeepSpeedStrategy):
            say_unreached_layers(self)


def say_unreached_layers(module: torch.nn.Module) -> None:
    if layers := unreached_layers(module):
        warn_once(f"No gradient reached the trained parameters of {len(layers)} layers (e.g. {layers[0]}): the loss "
                  f"does not use them (a model may read a layer's weight without calling it), so they never train, "
                  f"and under trainer=ddp the next step stops on them; leave them out of model.lora.target_modules, "
                  f"or with trainer=ddp set trainer.strategy=ddp_find_unused_parameters_true.")
