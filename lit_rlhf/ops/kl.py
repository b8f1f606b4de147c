"""Per-token KL estimators between the policy and the reference (http://joschu.net/blog/kl-approx.html).

With samples from the policy and log r = ref_logprob - logprob:
  k1 = -log r                 unbiased, can be negative per token
  k2 = (log r)^2 / 2          biased, low variance, >= 0
  k3 = (r - 1) - log r        unbiased, >= 0
"""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


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
