"""Advantages: the RLOO leave-one-out baseline and reward-to-go.

Shapes: B prompts, K samples per prompt, N = B*K sequences, R response length.
Siblings are identified by `prompt_index` (N,), so any batch layout works (prompt-major,
sample-major as in TRL, or shuffled).
"""

from __future__ import annotations

import torch


def leave_one_out_baseline(rewards: torch.Tensor, prompt_index: torch.Tensor) -> torch.Tensor:
    """Mean reward of the other K-1 samples of the same prompt. (N,), (N,) -> (N,)"""
    num_prompts = int(prompt_index.max()) + 1
    group_sum = torch.zeros(num_prompts, dtype=rewards.dtype, device=rewards.device)
    group_sum = group_sum.index_add(0, prompt_index, rewards)  # B
    group_size = torch.bincount(prompt_index, minlength=num_prompts).to(rewards.dtype)  # B
    if bool((group_size[prompt_index] < 2).any()):
        raise ValueError("RLOO needs at least 2 samples per prompt (rloo_k >= 2).")
    return (group_sum[prompt_index] - rewards) / (group_size[prompt_index] - 1)  # N


def rloo_advantages(rewards: torch.Tensor, prompt_index: torch.Tensor) -> torch.Tensor:
    """REINFORCE leave-one-out: reward minus the mean reward of the siblings. (N,) -> (N,)"""
    return rewards - leave_one_out_baseline(rewards, prompt_index)


def discounted_reverse_cumsum(values: torch.Tensor, discount: float) -> torch.Tensor:
    """out_t = sum_{u >= t} discount^(u-t) x_u along the last dim, as one matmul. (N,R) -> (N,R)"""
    length = values.shape[-1]
    positions = torch.arange(length, device=values.device)
    offset = positions.unsqueeze(0) - positions.unsqueeze(1)  # R,R  u - t
    weights = torch.pow(torch.tensor(float(discount), dtype=torch.float64, device=values.device),
                        offset.clamp(min=0).double())  # R,R  (0^0 = 1 keeps lam = 0 exact)
    weights = (weights * (offset >= 0)).to(values.dtype)  # upper triangle: only u >= t
    return values @ weights.T  # N,R


def reward_to_go(token_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """G_t = sum_{t' >= t} gamma^(t'-t) r_t' over the masked response. (N,R) -> (N,R)"""
    mask = response_mask.to(token_rewards.dtype)
    return discounted_reverse_cumsum(token_rewards * mask, gamma) * mask


def gae_advantages(token_rewards: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor,
                   gamma: float, lam: float) -> torch.Tensor:
    """Generalized advantage estimation (Schulman et al. 2016) over the response. (N,R) x3 -> (N,R)

    delta_t = r_t + gamma * V_{t+1} - V_t, with V = 0 after the last response token;
    A_t = sum_{u >= t} (gamma * lam)^(u-t) delta_u.
    """
    mask = response_mask.to(values.dtype)
    values = values * mask
    next_values = torch.nn.functional.pad(values[:, 1:], (0, 1))  # N,R  V_{t+1}, 0 past the end
    deltas = (token_rewards + gamma * next_values - values) * mask  # N,R
    return discounted_reverse_cumsum(deltas, gamma * lam) * mask


def place_score_on_last_token(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-token rewards holding each score on its last response token. (N,), (N,R) -> (N,R)"""
    last = response_mask.long().sum(1).clamp(min=1) - 1  # N
    placed = torch.zeros(response_mask.shape, dtype=scores.dtype, device=scores.device)
    return placed.scatter(1, last.unsqueeze(1), scores.unsqueeze(1))  # N,R
