"""The PPO clipped surrogate, per token (Schulman et al. 2017), with its diagnostics.

Shapes: M sequences in a minibatch, R response length.
"""

from __future__ import annotations

import torch

from lit_rlhf.ops.masks import masked_mean, masked_var

LOSS_AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "token_sum_norm")


def aggregate_loss(per_token: torch.Tensor, response_mask: torch.Tensor,
                   aggregation: str = "token_mean") -> torch.Tensor:
    """One number from per-token losses (M,R) of M sequences:
    token_mean            mean over every response token of the micro-batch (PPO's, TRL's RLOO's);
    seq_mean_token_mean   mean over sequences of each sequence's token mean (GRPO's);
    token_sum_norm        sum over response tokens / (M x R), R the padded response length (Dr. GRPO's):
                          no length bias, and the same scale however the batch is split."""
    mask = response_mask.to(per_token.dtype)  # M,R
    if aggregation == "token_mean":
        return masked_mean(per_token, response_mask)
    if aggregation == "seq_mean_token_mean":
        return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
    if aggregation == "token_sum_norm":
        return (per_token * mask).sum() / (per_token.shape[0] * per_token.shape[1])
    raise ValueError(f"loss aggregation {aggregation!r} is not one of {LOSS_AGGREGATIONS}")


def clipped_policy_loss(
    logprobs: torch.Tensor,  # M,R  under the policy being updated
    old_logprobs: torch.Tensor,  # M,R  under the policy that sampled
    advantages: torch.Tensor,  # M,R  (a sequence advantage broadcast over its tokens, or per token)
    response_mask: torch.Tensor,  # M,R
    cliprange: float,
    aggregation: str = "token_mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps)), aggregated (aggregate_loss), and its statistics."""
    logprobs_diff = logprobs - old_logprobs  # M,R
    ratio = torch.exp(logprobs_diff)  # M,R
    pg_losses = -advantages * ratio  # M,R
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)  # M,R
    pg_loss_max = torch.max(pg_losses, pg_losses2)  # M,R
    pg_loss = aggregate_loss(pg_loss_max, response_mask, aggregation)
    with torch.no_grad():
        stats = {
            "approxkl": 0.5 * masked_mean(logprobs_diff**2, response_mask),
            "clipfrac": masked_mean((pg_losses2 > pg_losses).float(), response_mask),
            "ratio": masked_mean(ratio, response_mask),
            "ratio_var": masked_var(ratio, response_mask),
        }
    return pg_loss, stats


def clipped_value_loss(
    vpred: torch.Tensor,  # M,R  values under the critic being updated
    values: torch.Tensor,  # M,R  values at rollout time
    returns: torch.Tensor,  # M,R
    response_mask: torch.Tensor,  # M,R
    cliprange_value: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """0.5 * token-mean of max((V - G)^2, (clip(V, V_old +- eps) - G)^2), and the clipped fraction."""
    vpredclipped = torch.clamp(vpred, values - cliprange_value, values + cliprange_value)  # M,R
    vf_losses1 = (vpred - returns) ** 2  # M,R
    vf_losses2 = (vpredclipped - returns) ** 2  # M,R
    vf_loss = 0.5 * masked_mean(torch.max(vf_losses1, vf_losses2), response_mask)
    vf_clipfrac = masked_mean((vf_losses2 > vf_losses1).float(), response_mask)
    return vf_loss, vf_clipfrac.detach()
