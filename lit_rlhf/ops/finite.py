"""Whether tensors hold only finite values, in one fused pass over them."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def all_finite(tensors: Sequence[torch.Tensor], also: torch.Tensor | None = None) -> bool:
    """True when every element of every tensor is finite. One norm per tensor (torch's fused multi-tensor norm,
    which clip_grad_norm_ uses too) instead of an elementwise isfinite per tensor: a NaN or inf element makes its
    tensor's norm NaN or inf. A norm can also overflow where every element is finite (|x| > ~1e19 in float32), so a
    non-finite norm is confirmed elementwise before the answer is False. also: a bool tensor (e.g. whether the losses
    were finite) that must be True as well, joined on the device, so that the answer costs one host read."""
    if not tensors:
        return True if also is None else bool(also)
    norms = torch._foreach_norm(list(tensors))
    finite = torch.isfinite(torch.stack([n.float().to(norms[0].device) for n in norms])).all()
    if also is not None:
        finite = finite & also.to(finite.device)
    if bool(finite):
        return True
    if also is not None and not bool(also):
        return False
    return all(bool(torch.isfinite(t).all()) for t in tensors)
