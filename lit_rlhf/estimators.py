"""Advantage estimators: the seam between a scored rollout and the loss.

An estimator is a function (EstimatorInputs, settings) -> Estimate, registered by name in ESTIMATORS;
a module picks one by name (RLOOModule: `loo`, PPOModule: `gae`, GRPOModule: `group`, or `group_decoupled` with
multi_objective_aggregation=normalize_then_sum, ReinforcePPModule: `reinforce_pp`), so a new estimator is one function
plus the setting that names it. Pure tensor maths on top of lit_rlhf.ops: no Lightning, no models.

Shapes: N sequences, R response length, C rewards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from lit_rlhf.ops import (
    gae_advantages,
    global_masked_whiten,
    group_all_equal,
    group_mean,
    group_normalized_sum,
    group_std,
    identity_sum,
    leave_one_out_baseline,
    place_score_on_last_token,
    reward_to_go,
)


@dataclass
class EstimatorInputs:
    scores: torch.Tensor  # N    reward after transforms and the missing-EOS penalty
    non_score_reward: torch.Tensor  # N,R  -kl_coef * KL_t, zero after the stop token
    response_mask: torch.Tensor  # N,R
    prompt_index: torch.Tensor  # N    siblings share a prompt index
    values: torch.Tensor | None = None  # N,R  the critic's values at rollout time
    # sums a tensor over every rank (the strategy's all-reduce): statistics "over the batch" are global
    all_reduce_sum: Callable[[torch.Tensor], torch.Tensor] = identity_sum
    # N,C  each reward's scores (NaN: it did not apply) and C their weights, for an estimator that normalizes each
    reward_scores: torch.Tensor | None = None
    reward_weights: torch.Tensor | None = None


def global_mean_std(values: torch.Tensor, all_reduce_sum) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased standard deviation of values (N) over every rank."""
    sums = all_reduce_sum(torch.stack([values.sum(), torch.tensor(float(len(values)), device=values.device,
                                                                  dtype=values.dtype)]))
    mean = sums[0] / sums[1]
    var = all_reduce_sum(((values - mean) ** 2).sum()) / (sums[1] - 1).clamp(min=1)
    return mean, var.sqrt()


def global_nan_mean_std(values: torch.Tensor, all_reduce_sum) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased standard deviation of the values (N) that are not NaN, over every rank (TRL's nanmean and
    nanstd of the gathered batch; a std of 0 when one value or none)."""
    present = ~values.isnan()  # N
    sums = all_reduce_sum(torch.stack([values.nan_to_num(0.0).sum(), present.sum().to(values.dtype)]))
    mean = sums[0] / sums[1].clamp(min=1)
    squares = all_reduce_sum(((values - mean) ** 2).nan_to_num(0.0).sum())
    return mean, (squares / (sums[1] - 1).clamp(min=1)).sqrt()


@dataclass
class Estimate:
    advantages: torch.Tensor  # N,R  zero after the stop token
    rlhf_reward: torch.Tensor  # N    score - kl_coef * sum_t KL_t
    returns: torch.Tensor | None = None  # N,R  value targets, for estimators with a critic


def leave_one_out(inputs: EstimatorInputs, settings: Any) -> Estimate:
    """RLOO (Ahmadian et al. 2024). settings.kl_penalty `sequence`: advantage = rlhf_reward - mean of the K-1
    siblings' rlhf_reward, on every token. `token`: token t's advantage is its reward-to-go minus the
    siblings' mean return. settings.normalize_advantage whitens over the batch."""
    mask = inputs.response_mask  # N,R
    if settings.kl_penalty == "sequence":
        rlhf_reward = inputs.scores + inputs.non_score_reward.sum(1)  # N
        advantages = rlhf_reward - leave_one_out_baseline(rlhf_reward, inputs.prompt_index)  # N
        if settings.normalize_advantage:  # over the sequences of every rank
            mean, std = global_mean_std(advantages, inputs.all_reduce_sum)
            advantages = (advantages - mean) / (std + 1e-8)
        return Estimate(advantages.unsqueeze(1) * mask, rlhf_reward)
    token_rewards = inputs.non_score_reward + place_score_on_last_token(inputs.scores, mask)  # N,R
    returns = reward_to_go(token_rewards, mask)  # N,R
    rlhf_reward = returns[:, 0]  # N
    advantages = (returns - leave_one_out_baseline(rlhf_reward, inputs.prompt_index).unsqueeze(1)) * mask  # N,R
    if settings.normalize_advantage:
        advantages = global_masked_whiten(advantages, mask, inputs.all_reduce_sum)
    return Estimate(advantages, rlhf_reward)


def generalized_advantage(inputs: EstimatorInputs, settings: Any) -> Estimate:
    """GAE (Schulman et al. 2016) over per-token rewards (-kl_coef * KL_t, plus the score on the last
    response token), with settings.gamma, settings.lam; optional reward whitening (scale only) first.
    Advantages are returned before whitening (settings.whiten_advantages is applied by the module, after
    its statistics)."""
    mask = inputs.response_mask  # N,R
    token_rewards = inputs.non_score_reward + place_score_on_last_token(inputs.scores, mask)  # N,R
    if settings.whiten_rewards:
        token_rewards = global_masked_whiten(token_rewards, mask, inputs.all_reduce_sum, shift_mean=False)
    values = inputs.values * mask  # N,R
    advantages = gae_advantages(token_rewards, values, mask, settings.gamma, settings.lam)  # N,R
    return Estimate(advantages, inputs.scores + inputs.non_score_reward.sum(1), returns=advantages + values)


def group_relative(inputs: EstimatorInputs, settings: Any) -> Estimate:
    """GRPO (Shao et al. 2024): advantage = (r - group mean) / (std + 1e-4) on every token, r the score (minus
    the summed KL penalty when the KL is in the reward). settings.scale_rewards: `group` (the group's std),
    `batch` (the std over the whole batch of every rank) or `none` (no division: Dr. GRPO, Liu et al. 2025)."""
    mask = inputs.response_mask  # N,R
    rewards = inputs.scores + inputs.non_score_reward.sum(1)  # N
    advantages = rewards - group_mean(rewards, inputs.prompt_index)  # N
    if settings.scale_rewards == "group":
        advantages = advantages / (group_std(rewards, inputs.prompt_index) + 1e-4)
    elif settings.scale_rewards == "batch":
        advantages = advantages / (global_mean_std(rewards, inputs.all_reduce_sum)[1] + 1e-4)
    # a group of equal rewards carries no signal: exactly 0, not the rounding error of its mean over its std
    advantages = advantages.masked_fill(group_all_equal(rewards, inputs.prompt_index), 0.0)  # N
    return Estimate(advantages.unsqueeze(1) * mask, rewards)


def decoupled_group_relative(inputs: EstimatorInputs, settings: Any) -> Estimate:
    """GDPO (group reward-decoupled normalization, arXiv 2601.05242; TRL's multi_objective_aggregation=
    normalize_then_sum): each reward normalized in its group, their weighted sum (ops.group_normalized_sum) s, then
    advantage = (s - mean) / (std + 1e-4) over the batch of every rank, on every token; 0 for a sequence no reward
    scored (left out of the batch's mean and std)."""
    summed = group_normalized_sum(inputs.reward_scores, inputs.reward_weights, inputs.prompt_index)  # N
    mean, std = global_nan_mean_std(summed, inputs.all_reduce_sum)
    advantages = ((summed - mean) / (std + 1e-4)).nan_to_num(0.0)  # N
    return Estimate(advantages.unsqueeze(1) * inputs.response_mask, inputs.scores + inputs.non_score_reward.sum(1))


def reinforce_plus_plus(inputs: EstimatorInputs, settings: Any) -> Estimate:
    """REINFORCE++ (Hu et al. 2025): per-token rewards (-kl_coef * KL_t, plus the score on the last token), their
    reward-to-go, whitened over the whole batch of every rank. settings.baseline=`group` (REINFORCE++-baseline)
    subtracts each group's mean score first."""
    mask = inputs.response_mask  # N,R
    scores = inputs.scores  # N
    if settings.baseline == "group":
        scores = scores - group_mean(scores, inputs.prompt_index)
    if getattr(settings, "reward_clamp", None) is not None:  # OpenRLHF clamps the baseline-subtracted reward
        scores = scores.clamp(-settings.reward_clamp, settings.reward_clamp)
    returns = reward_to_go(inputs.non_score_reward + place_score_on_last_token(scores, mask), mask)  # N,R
    advantages = global_masked_whiten(returns, mask, inputs.all_reduce_sum)  # N,R
    return Estimate(advantages, inputs.scores + inputs.non_score_reward.sum(1))


ESTIMATORS: dict[str, Callable[[EstimatorInputs, Any], Estimate]] = {
    "loo": leave_one_out,
    "gae": generalized_advantage,
    "group": group_relative,
    "group_decoupled": decoupled_group_relative,
    "reinforce_pp": reinforce_plus_plus,
}
