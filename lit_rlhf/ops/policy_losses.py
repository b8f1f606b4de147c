"""Per-token policy losses beside PPO's clipped surrogate, chosen by name, and the sequence-level importance ratio.

- `clip` (PPO, Schulman et al. 2017): max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)); with delta (INTELLECT-2's
  two-sided clip, TRL's delta) the first r is min(r, delta), bounding the loss of a negative advantage.
- `cispo` (MiniMax-M1, 2025): -sg(min(r, cap)) A log pi. The clipped importance weight carries no gradient,
  so no token's gradient is dropped (the clip only bounds its weight); the REINFORCE term log pi carries it.
- `sapo` (Soft Adaptive Policy Optimization, Wu et al. 2025): -g(r) A with the soft gate
  g(r) = sigmoid(tau (r - 1)) 4 / tau, tau = tau_pos for A > 0 and tau_neg for A < 0. At r = 1 its gradient
  equals the surrogate's (g'(1) = 1); away from 1 it fades smoothly instead of stopping at a clip boundary.
- `vespo` (Variational Sequence-Level Soft Policy Optimization, arXiv 2602.10693; TRL's loss_type="vespo"):
  -sg(phi(w)) A log pi with w the sequence's importance ratio, exp of its tokens' summed log-ratios (and of the
  engine's per-token correction, folded in), and phi(w) = exp(lambda) w^k exp(-lambda w), 1 at w = 1, with (k, lambda)
  by the advantage's sign: a smooth, asymmetric weight in place of a clip (`vespo_weights`).

The ratio r = pi / pi_old is per token, or with importance_sampling_level="sequence" (GSPO, Zheng et al. 2025)
the sequence's exp(mean_t log r_t), the same for all its tokens, so a sequence is clipped as a whole (GSPO's
clip range is small: 3e-4 below, 4e-4 above).

Shapes: M sequences, R response length.
"""

from __future__ import annotations

import math

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


@torch.no_grad()
def vespo_weights(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor,
                  engine_weights: torch.Tensor | None, k_pos: float, lambda_pos: float, k_neg: float,
                  lambda_neg: float) -> torch.Tensor:
    """VESPO's weight phi(w) = exp(lambda + k log w - lambda w) of each token (no gradient), computed as TRL's
    get_gamma_weights: log w = the sum over the sequence's tokens of log pi - log pi_old (each clamped to [-20, 20]),
    plus the sum of the log engine weights pi_old / pi_sampler when given (clamped to [log 1e-8, 20]), then log w
    clamped to [log 1e-8, 20]; (k, lambda) = (k_pos, lambda_pos) where A >= 0, else the _neg pair (lambda floored at
    1e-4); a non-finite phi is 0. (M,R) x4 (engine_weights: M,R or None) -> (M,R)"""
    floor = math.log(1e-8)
    mask = mask.to(logprobs.dtype)
    log_w = ((logprobs - old_logprobs).clamp(-20.0, 20.0) * mask).sum(1, keepdim=True)  # M,1
    if engine_weights is not None:
        log_w = log_w + (torch.log(engine_weights).clamp(floor, 20.0) * mask).sum(1, keepdim=True)
    log_w = log_w.clamp(floor, 20.0)  # M,1
    nonnegative = advantages >= 0  # M,R
    k = torch.where(nonnegative, k_pos, k_neg)  # M,R
    lam = torch.where(nonnegative, lambda_pos, lambda_neg).clamp(min=1e-4)  # M,R
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))  # M,R
    return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def vespo_loss(advantages: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    """VESPO per token before its weight: -A log pi (the weight phi multiplies it as a per-token loss weight, beside
    the masks; see vespo_weights). (M,R) x2 -> (M,R)"""
    return -advantages * logprobs
