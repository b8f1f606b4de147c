"""The PPO clipped surrogate, per token (Schulman et al. 2017), with its diagnostics.

Shapes: M sequences in a minibatch, R response length.
"""

from __future__ import annotations

import torch

from lit_rlhf.ops.masks import masked_mean, masked_var


def clipped_policy_loss(
    logprobs: torch.Tensor,  # M,R  under the policy being updated
    old_logprobs: torch.Tensor,  # M,R  under the policy that sampled
    advantages: torch.Tensor,  # M,R  (a sequence advantage broadcast over its tokens, or per token)
    response_mask: torch.Tensor,  # M,R
    cliprange: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token-mean of max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps)) and its statistics."""
    logprobs_diff = logprobs - old_logprobs  # M,R
    ratio = torch.exp(logprobs_diff)  # M,R
    pg_losses = -advantages * ratio  # M,R
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)  # M,R
    pg_loss_max = torch.max(pg_losses, pg_losses2)  # M,R
    pg_loss = masked_mean(pg_loss_max, response_mask)
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
