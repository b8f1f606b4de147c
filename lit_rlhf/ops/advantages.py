"""Advantages: group statistics (the RLOO leave-one-out baseline, GRPO's group mean and std), reward-to-go,
GAE, and whitening over the batch of every rank.

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


def group_mean(values: torch.Tensor, prompt_index: torch.Tensor) -> torch.Tensor:
    """Mean over each sequence's group (the K samples of its prompt), for every sequence. (N,), (N,) -> (N,)"""
    num_prompts = int(prompt_index.max()) + 1
    group_sum = torch.zeros(num_prompts, dtype=values.dtype, device=values.device).index_add(0, prompt_index, values)
    group_size = torch.bincount(prompt_index, minlength=num_prompts).to(values.dtype)  # B
    return (group_sum / group_size.clamp(min=1))[prompt_index]  # N


def group_all_equal(values: torch.Tensor, prompt_index: torch.Tensor, rtol: float = 1e-6) -> torch.Tensor:
    """True for every sequence whose group's values are all equal (max - min <= rtol x max(1, |max|)), NaNs left
    out; values (N,C) are C columns, each judged on its own. A computed std is not the test: in float32 the std of
    eight 0.7s is ~6e-8, not 0. (N,) or (N,C), (N,) -> the same shape, bool"""
    num_prompts = int(prompt_index.max()) + 1
    groups = prompt_index.view(-1, *[1] * (values.dim() - 1)).expand_as(values)  # N(,C)
    fill = values.new_full((num_prompts, *values.shape[1:]), torch.inf)  # B(,C)
    lowest = fill.scatter_reduce(0, groups, values.nan_to_num(torch.inf), reduce="amin")  # B(,C)
    highest = (-fill).scatter_reduce(0, groups, values.nan_to_num(-torch.inf), reduce="amax")  # B(,C)
    equal = (highest - lowest) <= rtol * highest.abs().clamp(min=1.0)  # B(,C)
    return equal[prompt_index]  # N(,C)


def group_std(values: torch.Tensor, prompt_index: torch.Tensor) -> torch.Tensor:
    """Unbiased standard deviation over each sequence's group, for every sequence (K >= 2). (N,), (N,) -> (N,)"""
    num_prompts = int(prompt_index.max()) + 1
    group_size = torch.bincount(prompt_index, minlength=num_prompts).to(values.dtype)  # B
    if bool((group_size[prompt_index] < 2).any()):
        raise ValueError("a group standard deviation needs at least 2 samples per prompt.")
    squared = (values - group_mean(values, prompt_index)) ** 2  # N
    group_ss = torch.zeros(num_prompts, dtype=values.dtype, device=values.device).index_add(0, prompt_index, squared)
    return (group_ss / (group_size - 1).clamp(min=1)).sqrt()[prompt_index]  # N


def group_normalized_sum(scores: torch.Tensor, weights: torch.Tensor, prompt_index: torch.Tensor,
                         rtol: float = 1e-6) -> torch.Tensor:
    """GDPO's reward (TRL's normalize_then_sum): each column of scores (one reward's, NaN where it did not apply)
    normalized in each sequence's group over the scores it gave there, (r - mean) / (unbiased std + 1e-4), then the
    weighted sum of the columns, NaN ones left out (TRL's nansum). A column whose group's scores are all equal adds
    exactly 0 there, not its rounding error over a ~1e-8 std (as group_all_equal), nor does one with a single score
    in the group (TRL's nanstd is NaN). NaN for a sequence no column scored. (N,C), (C,), (N,) -> (N,)"""
    num_prompts = int(prompt_index.max()) + 1
    scored = ~scores.isnan()  # N,C
    zeros = torch.zeros(num_prompts, scores.shape[1], dtype=scores.dtype, device=scores.device)  # B,C
    count = zeros.index_add(0, prompt_index, scored.to(scores.dtype))  # B,C
    mean = zeros.index_add(0, prompt_index, scores.nan_to_num(0.0)) / count  # B,C  NaN where none scored
    deviation = scores - mean[prompt_index]  # N,C  NaN where not scored
    squares = zeros.index_add(0, prompt_index, deviation.nan_to_num(0.0) ** 2)  # B,C
    std = (squares / (count - 1).clamp(min=1)).sqrt()  # B,C
    equal = group_all_equal(scores, prompt_index, rtol)  # N,C
    normalized = (deviation / (std[prompt_index] + 1e-4)).masked_fill(equal & scored, 0.0)  # N,C
    return (normalized * weights).nansum(1).masked_fill(~scored.any(1), torch.nan)  # N


def identity_sum(total: torch.Tensor) -> torch.Tensor:
    """The all-reduce of a single process: each rank passes its strategy's sum over ranks instead."""
    return total


def global_masked_whiten(values: torch.Tensor, mask: torch.Tensor, all_reduce_sum=identity_sum,
                         shift_mean: bool = True) -> torch.Tensor:
    """(x - mean) / std over the masked entries of every rank (all_reduce_sum sums a tensor over ranks),
    unbiased variance; masked-out entries are returned as 0. One rank: the same as masked_whiten."""
    mask = mask.to(values.dtype)
    sums = all_reduce_sum(torch.stack([(values * mask).sum(), mask.sum()]))  # [sum x, count]
    mean = sums[0] / sums[1].clamp(min=1)
    squares = all_reduce_sum(((values - mean) ** 2 * mask).sum())
    var = squares / (sums[1] - 1).clamp(min=1)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask


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
