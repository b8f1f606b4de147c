"""WeightedSum: several named rewards, each with a weight; the module logs each one (`rewards/<name>/mean`,
`rewards/<name>/std`) beside the weighted total it trains on.

From the CLI, every reward config is a WeightedSum of one named reward, so that selecting several merges them:
`reward=[arithmetic_correct,arithmetic_format]`, weights as `reward.weights.arithmetic_format=0.5`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from lit_rlhf.config.validation import check_flag
from lit_rlhf.errors import ConfigError
from lit_rlhf.interrupts import thread_pool
from lit_rlhf.rewards.protocol import Reward, call_reward, load_reward
from lit_rlhf.rewards.reward_model import SequenceClassifierReward


def reward_name(reward: Any) -> str:
    return getattr(reward, "__name__", None) or type(reward).__name__


def finite_weight(name: str, value: Any) -> float:
    try:
        weight = float(value)
    except (TypeError, ValueError):
        weight = math.nan
    if not math.isfinite(weight):
        raise ConfigError(f"reward.weights.{name}={value!r} must be a finite number (e.g. 0.5).")
    return weight


def as_scores(returned: Any) -> torch.Tensor:
    """A reward's scores as float32, its Nones (does not apply) as NaN."""
    if isinstance(returned, (list, tuple)):
        returned = [math.nan if value is None else value for value in returned]
    return torch.as_tensor(returned).float()


class WeightedSum:
    """sum_name weight[name] * rewards[name](prompts, completions, **columns).

    rewards: {name: reward} (or a list, named after each reward's function or class); weights: {name: weight} or
    a list in the same order (missing: 1.0). concurrent=True calls the rewards in threads at the same time, for
    rewards that wait on something (a verifier process, a remote judge)."""

    def __init__(self, rewards: Mapping[str, Reward] | Sequence[Reward],
                 weights: Mapping[str, float] | Sequence[float] | None = None, concurrent: bool = False):
        check_flag("reward.concurrent", concurrent)
        if not isinstance(rewards, Mapping):
            rewards = {reward_name(r): r for r in rewards}
        if weights is not None and not isinstance(weights, Mapping):
            if len(weights) != len(rewards):
                raise ValueError(f"WeightedSum got {len(rewards)} rewards and {len(weights)} weights; give one "
                                 f"weight per reward.")
            weights = dict(zip(rewards, weights, strict=True))
        weights = dict(weights or {})
        unknown = sorted(set(weights) - set(rewards))
        if unknown:
            raise ValueError(f"reward.weights names {unknown[0]!r}, which is not one of the rewards "
                             f"{sorted(rewards)}; weigh a reward that is selected.")
        self.rewards = dict(rewards)
        if not self.rewards:
            raise ConfigError("reward=[] selects no reward; pick one or more, e.g. reward=vader or "
                              "reward=[arithmetic_correct,arithmetic_format].")
        self.weights = {name: finite_weight(name, weights.get(name, 1.0)) for name in self.rewards}
        self.concurrent = concurrent

    def load(self) -> None:
        for reward in self.rewards.values():
            load_reward(reward)

    def components(self, prompts: Sequence[str], completions: Sequence[str],
                   columns: dict[str, list] | None = None, call=None) -> dict[str, Any]:
        """{name: what rewards[name] returned}; `call(name, reward, prompts, completions, columns)` makes each
        call (by default call_reward, which passes the columns the reward accepts)."""
        call = call or (lambda name, reward, *args: call_reward(reward, *args))
        if not self.concurrent or len(self.rewards) == 1:
            return {name: call(name, r, prompts, completions, columns) for name, r in self.rewards.items()}
        with thread_pool(len(self.rewards), "reward") as pool:
            futures = {name: pool.submit(call, name, r, prompts, completions, columns)
                       for name, r in self.rewards.items()}
            return {name: future.result() for name, future in futures.items()}

    def combine(self, components: Mapping[str, Any]) -> torch.Tensor:
        """sum_name weight[name] * score[name] over the rewards that scored each completion: a reward's None (TRL's
        "does not apply to this completion") is left out, as TRL's nansum leaves it; one none scored sums to 0."""
        scores = [self.weights[name] * as_scores(value) for name, value in components.items()]
        return torch.stack(scores).nansum(dim=0)

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> torch.Tensor:
        return self.combine(self.components(prompts, completions, columns))


def named_parts(reward: Any) -> dict[str, Any]:
    """{name: reward} of a WeightedSum's rewards, or {its name: itself} for any other reward."""
    return reward.rewards if isinstance(reward, WeightedSum) else {reward_name(reward): reward}


def reward_models(reward) -> list[SequenceClassifierReward]:
    """The sequence-classification reward models in a reward (itself, or a WeightedSum's parts)."""
    return [part for part in named_parts(reward).values() if isinstance(part, SequenceClassifierReward)]
