"""The sampler/trainer mismatch of an inference engine, and its correction by truncated importance sampling.

An engine such as vLLM samples with its own kernels, so the probability it gave a sampled token (pi_sampler)
differs slightly from the trainer's (pi_old) for the same weights. The policy gradient assumes the tokens came
from pi_old; weighting each token's loss by pi_old / pi_sampler, capped at C, corrects for that with bounded
variance (truncated importance sampling, Ionides 2008; the per-token form TRL, verl and OpenRLHF use).

Shapes: N sequences, R response length.
"""

from __future__ import annotations

import math

import torch

from lit_rlhf.ops.kl import kl_per_token
from lit_rlhf.ops.masks import masked_mean


def importance_weights(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, response_mask: torch.Tensor,
                       cap: float | None, mode: str = "token_truncate", lower: float | None = None) -> torch.Tensor:
    """pi_old / pi_sampler per token; per sequence (`sequence_*`, as TRL) the product of its tokens' ratios, exp of
    the summed log-ratio; `sequence_geo_*` the geometric mean, exp of the mean log-ratio (on every token of the
    sequence). `truncate` clamps it to [lower, cap], `mask` zeroes it outside [lower, cap] (the token, or the whole
    sequence, leaves the loss); a bound that is None is no bound (TRL's vllm_importance_sampling_clip_min/max).
    No gradient; 0 after the response. (N,R) x3 -> (N,R)"""
    mask = response_mask.to(old_logprobs.dtype)
    log_ratio = (old_logprobs - sampler_logprobs) * mask  # N,R
    if mode.startswith("sequence_geo"):
        log_ratio = (log_ratio.sum(1) / mask.sum(1).clamp(min=1)).unsqueeze(1).expand_as(log_ratio)  # N,R
    elif mode.startswith("sequence"):
        log_ratio = log_ratio.sum(1, keepdim=True).expand_as(log_ratio)  # N,R
    ratio = torch.exp(log_ratio)  # N,R
    if mode.endswith("truncate"):
        weights = ratio if lower is None and cap is None else ratio.clamp(min=lower, max=cap)
    else:
        outside = ratio > (math.inf if cap is None else cap)
        if lower is not None:
            outside |= ratio < lower
        weights = ratio.masked_fill(outside, 0.0)
    return (weights * mask).detach()


def off_policy_sequences(policy_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, response_mask: torch.Tensor,
                         advantages: torch.Tensor, threshold: float) -> torch.Tensor:
    """DeepSeek-V3.2's off-policy sequence masking (TRL's get_off_policy_mask): sequences with a negative advantage
    whose mean per-token log(pi_behaviour / pi_theta) exceeds threshold, pi_theta the policy being updated (its
    logprobs detached) and pi_behaviour the sampler's (or pi_old without engine logprobs): too far from the policy
    that drew them to learn from what went wrong. (M,R) x4 -> (M,) bool"""
    mask = response_mask.to(policy_logprobs.dtype)
    tokens = mask.sum(1).clamp(min=1)  # M
    kl = ((behaviour_logprobs - policy_logprobs.detach()) * mask).sum(1) / tokens  # M
    advantage = (advantages * mask).sum(1) / tokens  # M
    return (advantage < 0) & (kl > threshold)


def truncated_is_weights(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, cap: float) -> torch.Tensor:
    """min(pi_old / pi_sampler, cap) per token, without gradient. (N,R), (N,R) -> (N,R)"""
    return torch.exp(old_logprobs - sampler_logprobs).clamp(max=cap).detach()


def sampler_mismatch_stats(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, response_mask: torch.Tensor,
                           cap: float | None, mode: str = "token_truncate",
                           lower: float | None = None) -> dict[str, torch.Tensor]:
    """How far the sampler's logprobs are from the trainer's on the response tokens: the mean and max absolute
    difference, the k3 estimate of KL(sampler || trainer) per token (the tokens were drawn by the sampler), and,
    with a cap, the mean importance weight (per token; in `sequence_*` modes per sequence, as TRL logs it) and the
    share of tokens whose ratio the bounds truncated (`*_truncate` modes) or masked out (`*_mask` modes:
    rollout/is_masked_frac)."""
    mask = response_mask.bool()
    diff = (old_logprobs - sampler_logprobs).abs()  # N,R
    kl = kl_per_token(sampler_logprobs, old_logprobs, "k3")  # N,R
    stats = {"rollout/logprob_diff_mean": masked_mean(diff, mask),
             "rollout/logprob_diff_max": diff[mask].max() if mask.any() else diff.new_zeros(()),
             "rollout/sampler_kl": masked_mean(kl, mask)}
    if cap is not None:
        weights = importance_weights(old_logprobs, sampler_logprobs, mask, cap, mode, lower)  # N,R
        if mode.startswith("sequence"):  # one weight per sequence: their mean over sequences, as TRL logs it
            has_tokens = mask.any(1)  # N
            per_sequence = (weights * mask).sum(1) / mask.sum(1).clamp(min=1)  # N
            stats["rollout/is_weight_mean"] = per_sequence[has_tokens].mean() if has_tokens.any() \
                else weights.new_zeros(())
        else:
            stats["rollout/is_weight_mean"] = masked_mean(weights, mask)
        if mode.endswith("truncate"):
            ratio = importance_weights(old_logprobs, sampler_logprobs, mask, None, mode)  # N,R
            outside = (ratio > cap) | (ratio < (lower if lower is not None else -math.inf))  # N,R
            stats["rollout/is_truncated_frac"] = masked_mean(outside.float(), mask)
        else:
            stats["rollout/is_masked_frac"] = masked_mean((weights == 0).float(), mask)
    return stats
