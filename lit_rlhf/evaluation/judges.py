"""Pairwise judges: which of two completions of the same prompt is better.

A judge returns, for each pair, 1.0 when the policy's completion wins, 0.0 when the reference's
wins and 0.5 for a tie; the win rate is the mean. Any object with this call signature works, e.g.
an LLM judge that ignores the scores and reads the texts:

    class MyJudge:
        def __call__(self, prompts, policy_completions, reference_completions, policy_scores, reference_scores):
            return torch.tensor([...])  # (N,) in [0, 1]

and is selected with `judge._target_=my_module.MyJudge` (evaluate.py) or PolicyEvaluation(judge=MyJudge()).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import torch

from lit_rlhf.errors import ConfigError


class PairwiseJudge(Protocol):
    def __call__(self, prompts: Sequence[str], policy_completions: Sequence[str],
                 reference_completions: Sequence[str], policy_scores: torch.Tensor,
                 reference_scores: torch.Tensor) -> torch.Tensor: ...


class RewardJudge:
    """The completion with the higher reward wins; scores within `tie_margin` of each other tie."""

    def __init__(self, tie_margin: float = 0.0):
        # a negative margin would count every loss by less than it as a win
        if not isinstance(tie_margin, (int, float)) or isinstance(tie_margin, bool) or not 0 <= tie_margin < math.inf:
            raise ConfigError(f"judge.tie_margin={tie_margin!r} must be a finite number >= 0 (0: only equal scores "
                              f"tie).")
        self.tie_margin = tie_margin

    def __call__(self, prompts, policy_completions, reference_completions, policy_scores, reference_scores):
        difference = policy_scores - reference_scores  # N
        wins = (difference > self.tie_margin).float()
        ties = (difference.abs() <= self.tie_margin).float()
        return wins + 0.5 * ties  # N
