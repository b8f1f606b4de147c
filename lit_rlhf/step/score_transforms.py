"""Score transforms: what the module applies to the reward's scores inside the RL step, before advantages.

A score transform is any object with `transform_scores(scores, prompts, completions, context) -> scores`
(and, to be checkpointed, `state_dict()` / `load_state_dict()`); the module receives them in its
constructor (`score_transforms=[...]`) and applies them in order to training rollouts only. The context
(ScoreContext) is what a transform may use of the run: the reward, to score other texts, and the scores of every
rank. A transform written for the earlier `transform_scores(module, scores, prompts, completions)` still runs, with
a deprecation warning (apply_score_transform).

RewardNormalizer, in order: optionally subtract the reward of the query alone (the FAQ's fix for a reward dominated
by the prompt), update the running mean and variance with this step's scores from every rank,
normalize by them, optionally whiten the batch, optionally clip.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from lit_rlhf.config.validation import check_flag, check_setting_number, warn_once


@dataclass(frozen=True)
class ScoreContext:
    """What a score transform may use of the run."""

    score: Callable[[list[str], list[str]], torch.Tensor]  # the reward: (prompts, completions) -> N scores
    gather: Callable[[torch.Tensor], torch.Tensor]  # this rank's N values -> every rank's, flattened


@runtime_checkable
class ScoreTransform(Protocol):
    def transform_scores(self, scores: torch.Tensor, prompts: Sequence[str], completions: Sequence[str],
                         context: ScoreContext) -> torch.Tensor: ...


def apply_score_transform(transform: Any, scores: torch.Tensor, prompts: Sequence[str], completions: Sequence[str],
                          context: ScoreContext, module: Any) -> torch.Tensor:
    """transform.transform_scores with the context; one written for the module as its first argument gets the
    module, with a deprecation warning (that form goes in the next release)."""
    first = next(iter(inspect.signature(transform.transform_scores).parameters), None)
    if first == "module":
        warn_once(f"{type(transform).__name__}.transform_scores(module, scores, prompts, completions) is deprecated "
                  f"and goes in the next release; write transform_scores(scores, prompts, completions, context) "
                  f"(context.score: the reward, context.gather: every rank's values).")
        return transform.transform_scores(module, scores, prompts, completions)
    return transform.transform_scores(scores, prompts, completions, context)


class RewardNormalizer:
    def __init__(self, normalize: bool = True, shift_mean: bool = True, whiten_batch: bool = False,
                 reward_clip_range: float | None = None, subtract_query_reward: bool = False, epsilon: float = 1e-8):
        key = "score_transforms.reward_normalizer."
        for name, value in (("normalize", normalize), ("shift_mean", shift_mean), ("whiten_batch", whiten_batch),
                            ("subtract_query_reward", subtract_query_reward)):
            check_flag(key + name, value)
        # a negative range clamped every score to it: one constant
        check_setting_number(key + "reward_clip_range", reward_clip_range, minimum=0, strictly=True, optional=True)
        check_setting_number(key + "epsilon", epsilon, minimum=0, strictly=True)
        self.normalize, self.shift_mean, self.whiten_batch = normalize, shift_mean, whiten_batch
        self.reward_clip_range, self.epsilon = reward_clip_range, epsilon
        self.subtract_query_reward = subtract_query_reward
        self.count, self.mean, self.m2 = 0, 0.0, 0.0  # running moments (Chan et al.'s parallel update)

    @property
    def std(self) -> float:
        return (self.m2 / (self.count - 1)) ** 0.5 if self.count > 1 else 1.0

    def update(self, scores: torch.Tensor) -> None:
        scores = scores.detach().double().flatten()
        n, mean = scores.numel(), scores.mean().item()
        m2 = ((scores - mean) ** 2).sum().item()
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta**2 * self.count * n / total
        self.count = total

    def transform_scores(self, scores: torch.Tensor, prompts: Sequence[str], completions: Sequence[str],
                         context: ScoreContext) -> torch.Tensor:
        if self.subtract_query_reward:
            scores = scores - context.score(list(prompts), [""] * len(prompts))
        self.update(context.gather(scores))
        if self.normalize:
            shift = self.mean if self.shift_mean else 0.0
            scores = (scores - shift) / (self.std + self.epsilon)
        if self.whiten_batch:
            gathered = context.gather(scores)
            scores = (scores - gathered.mean()) / (gathered.std() + self.epsilon)
        if self.reward_clip_range is not None:
            scores = scores.clamp(-self.reward_clip_range, self.reward_clip_range)
        return scores

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.count, self.mean, self.m2 = state["count"], state["mean"], state["m2"]
