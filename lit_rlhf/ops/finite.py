"""Whether tensors hold only finite values, in one fused pass over them."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def all_finite(tensors: Sequence[torch.Tensor]) -> bool:
    """True when every element of every tensor is finite. One norm per tensor (torch's fused multi-tensor norm,
    which clip_grad_norm_ uses too) instead of an elementwise isfinite per tensor: a NaN or inf element makes its
    tensor's norm NaN or inf. A norm can also overflow where every element is finite (|x| > ~1e19 in float32), so a
    non-finite norm is confirmed elementwise before the answer is False."""
    if not tensors:
        return True
    norms = torch._foreach_norm(list(tensors))
    if bool(torch.isfinite(torch.stack([n.float().to(norms[0].device) for n in norms])).all()):
        return True
    return all(bool(torch.isfinite(t).all()) for t in tensors)
