"""Per-step statistics of a rollout's completions and groups, named as TRL's GRPO trainer logs them.

Shapes: N sequences, R response length.
"""

from __future__ import annotations

import math

import torch

from lit_rlhf.ops import group_all_equal
from lit_rlhf.statistics.estimates import distinct_n


def completion_stats(response_mask: torch.Tensor, contains_stop: torch.Tensor,
                     completions: list[str]) -> dict[str, torch.Tensor]:
    """completions/mean_length: response tokens (stop token included); completions/clipped_ratio: the share of
    responses cut at response_length without a stop token; completions/distinct_2: distinct word bigrams over all
    bigrams of the batch (it falls when completions collapse onto one phrase). (N,R), (N,), N texts -> scalars"""
    return {"completions/mean_length": response_mask.sum(1).float().mean(),
            "completions/clipped_ratio": (~contains_stop).float().mean(),
            "completions/distinct_2": torch.tensor(distinct_n(completions, 2))}


def reward_stats(components: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """rewards/<name>/mean and rewards/<name>/std of each named reward's scores (before weights) over the completions
    it scored (a NaN: it returned None, does not apply), as TRL's nanmean and nanstd; NaN where it scored none."""
    stats = {}
    for name, scores in components.items():
        scored = scores.float()[~scores.isnan()]
        stats[f"rewards/{name}/mean"] = scored.mean() if len(scored) else torch.tensor(math.nan)
        spread = scored.std() if len(scored) > 1 else torch.tensor(0.0 if len(scored) else math.nan)
        stats[f"rewards/{name}/std"] = spread
    return stats


def zero_std_groups(scores: torch.Tensor, prompt_index: torch.Tensor) -> torch.Tensor:
    """Whether each sequence's group has K equal scores (its group-relative advantages are all zero). -> (N,)"""
    return group_all_equal(scores, prompt_index)


def group_stats(scores: torch.Tensor, prompt_index: torch.Tensor) -> dict[str, torch.Tensor]:
    """rollout/zero_std_frac (TRL: frac_reward_zero_std): the share of groups whose K scores are all equal,
    with K >= 2 samples per prompt; nothing with one."""
    if len(scores) == int(prompt_index.max()) + 1:  # one sample per prompt: no groups
        return {}
    share = zero_std_groups(scores, prompt_index).float().mean()  # every group has K members: sequences = groups
    return {"rollout/zero_std_frac": share, "frac_reward_zero_std": share}


def mean_over_ranks(stats: dict[str, torch.Tensor], strategy, device: torch.device) -> dict[str, torch.Tensor]:
    """Every statistic's mean over the ranks, in one collective (the keys are the same on every rank), over the ranks
    where it is not NaN (a reward that scored none of a rank's completions: TRL's nanmean over the gathered scores)."""
    names = sorted(stats)
    local = torch.stack([stats[k].detach().to(device, torch.float64).reshape(()) for k in names])
    counted = ~local.isnan()
    totals = strategy.reduce(torch.cat([local.nan_to_num(0.0), counted.double()]), reduce_op="sum")
    sums, counts = totals[:len(names)], totals[len(names):]
    means = torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, math.nan))
    return {k: means[i] for i, k in enumerate(names)}


def host_values(stats: dict[str, torch.Tensor], device: torch.device) -> dict[str, float]:
    """Every statistic as a Python float (the value float() gives), those on `device` read back in one transfer: one
    host read per RL step, after the step's work, instead of one per statistic."""
    on_device = [k for k, v in stats.items() if v.device == device]
    values = {k: float(v) for k, v in stats.items() if v.device != device}  # already on the host
    if on_device:
        stacked = torch.stack([stats[k].detach().to(torch.float64).reshape(()) for k in on_device])
        values.update(zip(on_device, stacked.tolist(), strict=True))
    return {k: values[k] for k in stats}
