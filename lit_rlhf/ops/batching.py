"""Micro-batches by token budget: sequences of very different lengths make fixed-size micro-batches either
waste memory (short ones) or overflow it (long ones)."""

from __future__ import annotations

import torch

from lit_rlhf.errors import ConfigError


def split_by_tokens(idx: torch.Tensor, tokens: torch.Tensor, budget: int) -> list[torch.Tensor]:
    """Consecutive groups of the sequences idx (in their order) holding at most `budget` tokens each (a sequence
    longer than the budget is a group of its own). tokens: (N,) the token count of every sequence."""
    groups, current, used = [], [], 0
    for i, count in zip(idx.tolist(), tokens[idx].tolist(), strict=True):
        if current and used + count > budget:
            groups.append(current)
            current, used = [], 0
        current.append(i)
        used += count
    if current:
        groups.append(current)
    return [torch.tensor(g, dtype=idx.dtype, device=idx.device) for g in groups]


def divide(total: int, parts: int, name: str, what: str) -> int:
    """total / parts for the setting algo.<name>=parts, or a one-line error when it does not divide the `what`."""
    if total % parts:
        raise ConfigError(f"algo.{name}={parts} does not divide the {total} {what}; pick a divisor of {total}.")
    return total // parts
