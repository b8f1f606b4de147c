"""Task metrics: how well completions solve the task, measured apart from the reward (a reward can be hacked; an
exact match against the dataset's answer cannot, by a policy). A metric is

    metric.name                                   e.g. "exact_match", logged as eval/<name>
    metric.answers(completions) -> list           the final answer of each completion (None: none found)
    metric.correct(completions, **columns) -> (N,) tensor of 0/1, against the row's reference answer

With K samples per prompt, pass_at_k (Chen et al. 2021, the unbiased estimator) and majority_at_k (the most
common answer of the K, right or not) score each prompt; the bootstrap intervals resample prompts.

Where the rows name their task in a `data_source` column (verl's name; routed teachers read it too) and it holds
more than one task, each metric is also reported per task: eval/<name>/<task>.

Shapes: N = B*K completions, B prompts.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.tasks.arithmetic import answers_match, extract_answer, normalize
from lit_rlhf.terminal import printable

SOURCE_COLUMN = "data_source"


def rows_by_source(columns: dict[str, Sequence[Any]]) -> dict[str, list[int]]:
    """{task: indices of its completions} where the `data_source` column names more than one task, else {}. The
    names are the dataset's, control characters escaped (they reach metric names and the terminal)."""
    by_source: dict[str, list[int]] = {}
    for i, source in enumerate(columns.get(SOURCE_COLUMN, ())):
        by_source.setdefault(printable(source, one_line=True), []).append(i)
    return by_source if len(by_source) > 1 else {}


class TaskMetric(Protocol):
    name: str

    def answers(self, completions: Sequence[str]) -> list[str | None]: ...

    def correct(self, completions: Sequence[str], **columns: Any) -> torch.Tensor: ...


def check_answer_column(key: str, column: Any) -> None:
    """The column a metric or reward compares with: a name. Empty (an unset shell variable), no column's check ran and
    the first evaluation, before training, failed in a traceback."""
    if not isinstance(column, str) or not column:
        raise ConfigError(f"{key}={column!r} must name the dataset column holding the reference answer (e.g. "
                          f"{key}=answer).")


class ExactMatch:
    """1 when the completion's final answer (by default the integer after the last `Answer:`) equals the
    `answer_column` of its row, after normalization (whitespace, commas, leading + and zeros)."""

    def __init__(self, answer_column: str = "answer", name: str = "exact_match",
                 extract: Callable[[str], str | None] = extract_answer):
        check_answer_column(f"task_metrics.{name}.answer_column", answer_column)
        self.answer_column, self.name, self.extract = answer_column, name, extract

    def answers(self, completions: Sequence[str]) -> list[str | None]:
        return [None if (a := self.extract(c)) is None else normalize(a) for c in completions]

    def correct(self, completions: Sequence[str], **columns: Any) -> torch.Tensor:
        if self.answer_column not in columns:
            raise ConfigError(f"task metric {self.name} needs the dataset column {self.answer_column!r}; the rows have "
                             f"{sorted(columns) or 'no other columns'}.")
        return answers_match(completions, columns[self.answer_column], self.extract)


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Probability that at least one of k samples drawn from the n is correct: 1 - C(n-c, k) / C(n, k)."""
    if num_samples - num_correct < k:
        return 1.0
    return 1.0 - math.comb(num_samples - num_correct, k) / math.comb(num_samples, k)


def per_prompt_pass_at_k(correct: torch.Tensor, prompt_index: torch.Tensor, k: int) -> torch.Tensor:
    """pass@k of each prompt from its K samples' correctness. (N,), (N,) -> (B,)"""
    prompts = int(prompt_index.max()) + 1
    return torch.tensor([pass_at_k(int((prompt_index == b).sum()), int(correct[prompt_index == b].sum()), k)
                         for b in range(prompts)])


def per_prompt_majority(answers: Sequence[str | None], correct: torch.Tensor,
                        prompt_index: torch.Tensor) -> torch.Tensor:
    """1 where the most common answer of a prompt's K samples (ties: the first seen; no answer never wins) is a
    correct one, else 0. (N answers), (N,), (N,) -> (B,)"""
    prompts = int(prompt_index.max()) + 1
    votes: list[Counter] = [Counter() for _ in range(prompts)]
    first: list[dict] = [{} for _ in range(prompts)]  # answer: the index of its first completion
    for i, (answer, b) in enumerate(zip(answers, prompt_index.tolist(), strict=True)):
        if answer is not None:
            votes[b][answer] += 1
            first[b].setdefault(answer, i)
    return torch.tensor([float(correct[first[b][v.most_common(1)[0][0]]]) if v else 0.0 for b, v in enumerate(votes)])
