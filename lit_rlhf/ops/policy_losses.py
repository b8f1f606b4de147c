"""Per-token policy losses beside PPO's clipped surrogate, chosen by name, and the sequence-level importance ratio.

- `clip` (PPO, Schulman et al. 2017): max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)); with delta (INTELLECT-2's
  two-sided clip, TRL's delta) the first r is min(r, delta), bounding the loss of a negative advantage.
- `cispo` (MiniMax-M1, 2025): -sg(min(r, cap)) A log pi. The clipped importance weight carries no gradient,
  so no token's gradient is dropped (the clip only bounds its weight); the REINFORCE term log pi carries it.
- `sapo` (Soft Adaptive Policy Optimization, Wu et al. 2025): -g(r) A with the soft gate
  g(r) = sigmoid(tau (r - 1)) 4 / tau, tau = tau_pos for A > 0 and tau_neg for A < 0. At r = 1 its gradient
  equals the surrogate's (g'(1) = 1); away from 1 it fades smoothly instead of stopping at a clip boundary.

The ratio r = pi / pi_old is per token, or with importance_sampling_level="sequence" (GSPO, Zheng et al. 2025)
the sequence's exp(mean_t log r_t), the same for all its tokens, so a sequence is clipped as a whole (GSPO's
clip range is small: 3e-4 below, 4e-4 above).

Shapes: M sequences, R response length.
"""

from __future__ import annotations

import torch


def sequence_log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's log ratio: the mean over each sequence's response tokens of log pi - log pi_old, on every token of it
    (the gradient flows to all its tokens). (M,R) x3 -> (M,R)"""
    mask = mask.to(logprobs.dtype)
    mean = ((logprobs - old_logprobs) * mask).sum(1) / mask.sum(1).clamp(min=1)  # M
    return mean.unsqueeze(1).expand_as(logprobs)  # M,R


def clip_loss(ratio: torch.Tensor, advantages: torch.Tensor, low: float, high: float,
              delta: float | None = None) -> torch.Tensor:
    """PPO's clipped surrogate per token; with delta, INTELLECT-2's two-sided clip: the unclipped ratio capped at
    delta, so a token with A < 0 and r > delta adds -A delta (no gradient). (M,R) x2 -> (M,R)"""
    unclipped = ratio if delta is None else ratio.clamp(max=delta)
    return torch.max(-advantages * unclipped, -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high))


def cispo_loss(ratio: torch.Tensor, advantages: torch.Tensor, logprobs: torch.Tensor, cap: float) -> torch.Tensor:
    """CISPO per token: -sg(min(r, cap)) A log pi. (M,R) x3 -> (M,R)"""
    return -ratio.clamp(max=cap).detach() * advantages * logprobs


def sapo_gate(ratio: torch.Tensor, tau: torch.Tensor | float) -> torch.Tensor:
    """sigmoid(tau (r - 1)) 4 / tau: 2 / tau at r = 1, slope 1 there. (M,R) -> (M,R)"""
    return torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau


def sapo_loss(ratio: torch.Tensor, advantages: torch.Tensor, tau_pos: float, tau_neg: float) -> torch.Tensor:
    """SAPO per token: -g(r) A, the gate's temperature by the advantage's sign. (M,R) x2 -> (M,R)"""
    tau = torch.where(advantages > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))  # M,R
    return -sapo_gate(ratio, tau) * advantages
