"""Trained parameters the loss never reaches. A model may read a layer's weight without calling the layer (Mamba's
mixer multiplies by dt_proj's weight itself, and its fused kernels take x_proj's and out_proj's too), so a LoRA
adapter on that layer never enters the forward: it trains nothing, and under trainer=ddp the next step stops on
DDP's unused parameters. After the fit's first backward, such parameters are one warning naming their layers, or,
where DDP would stop on them (find_unused_parameters off), one error line in place of DDP's traceback a step later."""

from __future__ import annotations

import torch
from lightning.pytorch.strategies import DeepSpeedStrategy
from torch.nn.parallel import DistributedDataParallel

from lit_rlhf.config.validation import warn_once
from lit_rlhf.errors import ConfigError

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
            say_unreached_layers(self, stops_on_unused_parameters(getattr(trainer, "strategy", None)))


def stops_on_unused_parameters(strategy) -> bool:
    """Whether the strategy's DDP wrapper stops at the next forward on parameters a backward did not reach."""
    wrapper = getattr(strategy, "model", None)
    return (isinstance(wrapper, DistributedDataParallel) and not wrapper.find_unused_parameters
            and not wrapper.static_graph)


def say_unreached_layers(module: torch.nn.Module, stops: bool = False) -> None:
    """A warning naming the layers no gradient reached; with `stops` (DDP would stop on them), an error line."""
    if not (layers := unreached_layers(module)):
        return
    what = (f"No gradient reached the trained parameters of {len(layers)} layers (e.g. {layers[0]}): the loss does "
            f"not use them (a model may read a layer's weight without calling it), so they never train")
    if stops:
        raise ConfigError(f"{what}, and trainer=ddp stops on them; leave them out of model.lora.target_modules, or set "
                          f"trainer.strategy=ddp_find_unused_parameters_true.")
    warn_once(f"{what}, and under trainer=ddp the next step stops on them; leave them out of "
              f"model.lora.target_modules, or with trainer=ddp set trainer.strategy=ddp_find_unused_parameters_true.")
