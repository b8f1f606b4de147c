"""Per-token KL estimators between the policy and the reference (http://joschu.net/blog/kl-approx.html).

With samples from the policy and log r = ref_logprob - logprob:
  k1 = -log r                 unbiased, can be negative per token
  k2 = (log r)^2 / 2          biased, low variance, >= 0
  k3 = (r - 1) - log r        unbiased, >= 0
"""

from __future__ import annotations

import torch

from lit_rlhf.choices import KL_ESTIMATORS


def kl_per_token(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """(N,R), (N,R) -> (N,R). Mask the result with response_mask before summing."""
    log_ratio = ref_logprobs - logprobs  # N,R
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        return torch.expm1(log_ratio) - log_ratio
    raise ValueError(f"kl_estimator={estimator!r} is not one of {KL_ESTIMATORS}; pick one of those.")


def bias_corrected_kl(kl: torch.Tensor, logprobs: torch.Tensor, old_logprobs: torch.Tensor,
                      sequence_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The per-token KL term weighted by the importance ratio pi / pi_old (with its gradient), as TRL's
    `use_bias_correction_kl`. Responses are sampled from pi_old, so the plain k3 term's gradient,
    E_old[(1 - pi_ref/pi) grad log pi], is the gradient of KL(pi_ref || pi); weighted by the ratio it becomes
    E_old[ratio (log pi - log pi_ref) grad log pi], the gradient of the reverse KL(pi || pi_ref) that the
    objective states. The ratio is the loss's own (TRL's coef_1): per token, or with sequence_mask (M,R; GSPO's
    importance_sampling_level=sequence) each sequence's, exp of its tokens' mean log-ratio. (M,R) x3 -> (M,R)"""
    if sequence_mask is None:
        return kl * torch.exp(logprobs - old_logprobs)
    from lit_rlhf.ops.policy_losses import sequence_log_ratio

    return kl * torch.exp(sequence_log_ratio(logprobs, old_logprobs, sequence_mask))  # M,R
