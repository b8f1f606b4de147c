"""What a model does, measured on the model itself with a forward of a few tokens, once per model object: for the
properties that transformers' architectures differ in and that no config flag states (packing.py: whether packed
sequences stay apart; output_layer.py: whether the logits are the output layer's)."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable

import torch

from lit_rlhf.distributed.ranks import ranks_in_run

# a change relative to the largest magnitude that still counts as none: the probes compare the same computation two
# ways, which agree to the bit (or to float32's rounding) where the property holds and differ by far more where not;
# the verdict that costs only speed (chunking or packing off) is the one a doubt gives
PROBE_TOLERANCE = 1e-4


def unchanged(ours: torch.Tensor, theirs: torch.Tensor) -> bool:
    """Whether two probe outputs agree: the same shape and at most PROBE_TOLERANCE of the largest magnitude apart."""
    if ours.shape != theirs.shape:
        return False
    ours, theirs = ours.float(), theirs.float()
    return (ours - theirs).abs().max().item() <= PROBE_TOLERANCE * ours.abs().max().item()


def probe_ids(model: torch.nn.Module, ids: tuple[int, ...]) -> torch.Tensor:
    """Token ids (1,L) on the model's device, taken modulo its vocabulary."""
    device = next(model.parameters()).device
    return torch.tensor([ids], device=device) % model.get_input_embeddings().num_embeddings


def measured_once(verdicts: weakref.WeakKeyDictionary, model: torch.nn.Module,
                  measure: Callable[[], bool], warning: str) -> bool:
    """measure() in eval mode (no dropout) and without gradient, remembered for this model object; `warning` (rank
    zero) when it is False. Every rank of a run reaches it at the same forward (a sharded model's forward gathers
    its weights), and the same numbers give every rank the same verdict."""
    verdict = verdicts.get(model)
    if verdict is not None:
        return verdict
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            verdict = measure()
    finally:
        model.train(was_training)
    verdicts[model] = verdict
    if not verdict and (ranks_in_run() == 1 or torch.distributed.get_rank() == 0):
        warnings.warn(warning.format(model=model_type(model)), stacklevel=4)
    return verdict


def model_type(model: torch.nn.Module) -> str:
    return getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__
