"""Reward shaping from the response alone. Shapes: N sequences."""

from __future__ import annotations

import torch


def overlong_penalty(lengths: torch.Tensor, max_length: int, buffer: int, factor: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025): 0 up to max_length - buffer tokens, then falling
    linearly to -factor at max_length (and -factor beyond). (N,) -> (N,)"""
    free = max_length - buffer
    over = (lengths.to(torch.float32) - free).clamp(min=0) / buffer  # N  0 .. 1 within the buffer
    return -factor * over.clamp(max=1.0)
