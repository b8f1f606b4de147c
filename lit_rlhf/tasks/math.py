"""Correctness of math answers with the `math-verify` package (PyPI; `pip install -e ".[math]"`): the reference is
the row's answer column (GSM8K's `... #### 72`: the part after the last `####`), the completion's final answer is
what math-verify parses from it (`\\boxed{...}`, `#### n`, or its last expression), compared symbolically
(1/2 = 0.5 = \\frac{1}{2}).

math-verify bounds its parsing time with signals, which work in the main thread only: keep WeightedSum's
`concurrent=false` for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.tasks.metrics import check_answer_column


def math_verify():
    try:
        import math_verify
    except ImportError as err:
        raise ConfigError('reward=math_verify needs the math-verify package: pip install -e ".[math]" (or pip '
                          'install math-verify).') from err
    return math_verify


def reference_text(answer: Any) -> str:
    """GSM8K's answers end with `#### <number>` after the worked solution: the part after it."""
    text = str(answer)
    return text.rsplit("####", 1)[-1].strip() if "####" in text else text


def final_answer(completion: str) -> str:
    """The part after the last `####` when there is one (GSM8K's format), else the whole completion."""
    return completion.rsplit("####", 1)[-1] if "####" in completion else completion


class MathVerifyReward:
    """1.0 when the completion's final answer equals the row's reference answer (math-verify), else 0.0."""

    setting = "reward.rewards.math_verify"  # its key in the config (errors name it)

    def __init__(self, answer_column: str = "answer"):
        check_answer_column(f"{self.setting}.answer_column", answer_column)
        self.answer_column = answer_column
        self.verify = math_verify()

    def is_correct(self, completion: str, reference: Any) -> bool:
        gold = self.verify.parse(reference_text(reference))
        predicted = self.verify.parse(final_answer(completion))
        return bool(gold) and bool(predicted) and bool(self.verify.verify(gold, predicted))

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> torch.Tensor:
        if self.answer_column not in columns:
            raise ConfigError(f"reward=math_verify needs the dataset column {self.answer_column!r}; the rows have "
                              f"{sorted(columns) or 'no other columns'} (set its answer_column).")
        return torch.tensor([float(self.is_correct(c, a))
                             for c, a in zip(completions, columns[self.answer_column], strict=True)])


class MathVerifyMatch(MathVerifyReward):
    """The task metric of the same check (eval/math_verify), with math-verify's parsed answers for majority@k."""

    name = "math_verify"
    setting = "task_metrics.math_verify"

    def answers(self, completions: Sequence[str]) -> list[str | None]:
        parsed = [self.verify.parse(final_answer(c)) for c in completions]
        return [str(p[0]) if p else None for p in parsed]

    def correct(self, completions: Sequence[str], **columns: Any) -> torch.Tensor:
        return self([""] * len(completions), completions, **columns)
