"""Masks from stop-token positions, and masked statistics.

Shapes: N sequences, R response length.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def first_stop_index(responses: torch.Tensor, stop_token_id: int) -> torch.Tensor:
    """Index of the first stop token in each response, or R where there is none. (N,R) -> (N,)"""
    is_stop = responses == stop_token_id  # N,R
    length = responses.shape[1]
    positions = torch.arange(length, device=responses.device).expand_as(responses)  # N,R
    return torch.where(is_stop, positions, length).min(dim=1).values  # N


def response_mask_from_stop(responses: torch.Tensor, stop_token_id: int) -> torch.Tensor:
    """True on real response tokens, up to and including the first stop token. (N,R) -> (N,R)"""
    stop_at = first_stop_index(responses, stop_token_id)  # N
    positions = torch.arange(responses.shape[1], device=responses.device)  # R
    return positions.unsqueeze(0) <= stop_at.unsqueeze(1)  # N,R


def truncate_after_stop(responses: torch.Tensor, stop_token_id: int, pad_token_id: int):
    """Replaces everything after the first stop token by padding; returns (responses, response_mask)."""
    response_mask = response_mask_from_stop(responses, stop_token_id)  # N,R
    return responses.masked_fill(~response_mask, pad_token_id), response_mask


def contains_stop(responses: torch.Tensor, stop_token_id: int) -> torch.Tensor:
    """Whether each response has a stop token. (N,R) -> (N,) bool"""
    return (responses == stop_token_id).any(dim=1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    mask = mask.to(values.dtype)
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1)
    return (values * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    mean = masked_mean(values, mask)
    count = mask.sum()
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased:  # Bessel's correction where there are 2 values or more; chosen on the device, with no host read
        variance = torch.where(count > 1, variance * count / (count - 1).clamp(min=1), variance)
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(x - mean) / std over the masked entries; masked-out entries are returned as 0."""
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask.to(values.dtype)


def model_tokens_first(mask: torch.Tensor) -> torch.Tensor:
    """Per sequence, the positions of its masked tokens in order, then the others: the permutation that puts a
    trajectory's model tokens side by side (observation tokens and padding after them). (N,R) -> (N,R) indices"""
    return torch.sort((~mask.bool()).to(torch.int8), dim=1, stable=True).indices


def gather_tokens(values: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """values (N,R) in the order of model_tokens_first. -> (N,R)"""
    return values.gather(1, order)


def scatter_tokens(values: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """The inverse of gather_tokens: values (N,R) back at their positions. -> (N,R)"""
    return torch.zeros_like(values).scatter(1, order, values)


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, keep: float,
                      pool: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """TRL's top_entropy_quantile ("Beyond the 80/20 Rule", Wang et al. 2025): the tokens of mask (M,R) whose entropy
    (M,R) is at or above the (1 - keep) quantile of the entropies of the tokens the quantile is taken over: mask's own,
    or every rank's when pool gathers them (each rank's tensor, NaN outside its mask -> one flat tensor). keep = 1
    keeps every token, 0 the highest-entropy one. No token in mask anywhere: none kept. -> (M,R) bool"""
    values = entropy.detach().float().masked_fill(~mask, float("nan"))  # M,R
    pooled = values.flatten() if pool is None else pool(values)
    threshold = torch.nanquantile(pooled, 1.0 - keep)  # NaN when every value is: no token is kept
    return (values >= threshold) & mask  # M,R
