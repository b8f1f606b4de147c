"""Sums over the data-parallel ranks of a Lightning run."""

from __future__ import annotations

from collections.abc import Callable

import torch

from lit_rlhf.ops import identity_sum


def sum_over_ranks(trainer) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function that sums a tensor over the ranks of trainer's run (the tensor itself on one rank, or with no
    Trainer): the all_reduce_sum that estimators and the whitening of advantages take."""
    if trainer is None or trainer.world_size == 1:
        return identity_sum
    return lambda total: trainer.strategy.reduce(total.clone(), reduce_op="sum")
