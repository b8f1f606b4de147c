"""The sampler/trainer mismatch of an inference engine, and its correction by truncated importance sampling.

An engine such as vLLM samples with its own kernels, so the probability it gave a sampled token (pi_sampler)
differs slightly from the trainer's (pi_old) for the same weights. The policy gradient assumes the tokens came
from pi_old; weighting each token's loss by pi_old / pi_sampler, capped at C, corrects for that with bounded
variance (truncated importance sampling, Ionides 2008; the per-token form TRL, verl and OpenRLHF use).

Shapes: N sequences, R response length.
"""

from __future__ import annotations

import torch

from lit_rlhf.ops.kl import kl_per_token
from lit_rlhf.ops.masks import masked_mean


def truncated_is_weights(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, cap: float) -> torch.Tensor:
    """min(pi_old / pi_sampler, cap) per token, without gradient. (N,R), (N,R) -> (N,R)"""
    return torch.exp(old_logprobs - sampler_logprobs).clamp(max=cap).detach()


def sampler_mismatch_stats(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, response_mask: torch.Tensor,
                           cap: float | None) -> dict[str, torch.Tensor]:
    """How far the sampler's logprobs are from the trainer's on the response tokens: the mean and max absolute
    difference, the k3 estimate of KL(sampler || trainer) per token (the tokens were drawn by the sampler), and,
    with a cap, the mean importance weight and the share of tokens the cap truncated."""
    mask = response_mask.bool()
    diff = (old_logprobs - sampler_logprobs).abs()  # N,R
    kl = kl_per_token(sampler_logprobs, old_logprobs, "k3")  # N,R
    stats = {"rollout/logprob_diff_mean": masked_mean(diff, mask),
             "rollout/logprob_diff_max": diff[mask].max() if mask.any() else diff.new_zeros(()),
             "rollout/sampler_kl": masked_mean(kl, mask)}
    if cap is not None:
        ratio = torch.exp(old_logprobs - sampler_logprobs)  # N,R
        stats["rollout/is_weight_mean"] = masked_mean(ratio.clamp(max=cap), mask)
        stats["rollout/is_truncated_frac"] = masked_mean((ratio > cap).float(), mask)
    return stats
