"""The advantage estimate of a rollout, single-turn or a multi-turn episode (lit_rlhf/rollout/trajectory.py samples
those): on a trajectory the estimator sees the model's tokens only.

Shapes: N sequences, R trajectory length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from lit_rlhf.estimators import ESTIMATORS, Estimate, EstimatorInputs
from lit_rlhf.ops import gather_tokens, model_tokens_first, scatter_tokens
from lit_rlhf.step.rollout import Rollout


def estimate_advantages(rollout: Rollout, non_score_reward: torch.Tensor, estimator: str, hparams: Any,
                        all_reduce_sum: Callable[[torch.Tensor], torch.Tensor],
                        rewards: tuple[torch.Tensor, torch.Tensor] | None = None) -> Estimate:
    """The advantages of ESTIMATORS[estimator] with the algorithm's settings (hparams); rewards: each reward's scores
    (N,C) and weights (C), for an estimator that normalizes each one (`group_decoupled`).

    On a trajectory the estimator sees the model's tokens side by side (observation tokens taken out), so
    reward-to-go and GAE chain across tool turns with gamma and lambda as if the turns were one response, the
    values and advantages living on model tokens only (as verl's multi-turn PPO); results go back in place."""
    order = None if rollout.context_mask is None else model_tokens_first(rollout.response_mask)  # N,R
    per_token = [non_score_reward, rollout.response_mask, rollout.values]
    if order is not None:
        per_token = [None if t is None else gather_tokens(t, order) for t in per_token]
    inputs = EstimatorInputs(rollout.scores, per_token[0], per_token[1], rollout.prompt_index, per_token[2],
                             all_reduce_sum, *(rewards or ()))
    result = ESTIMATORS[estimator](inputs, hparams)
    if order is None:
        return result
    return replace(result, advantages=scatter_tokens(result.advantages, order),
                   returns=None if result.returns is None else scatter_tokens(result.returns, order))
