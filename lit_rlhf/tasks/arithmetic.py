"""The embedded arithmetic task: questions such as "What is 37+45?" with an `answer` column; a completion
answers with `Answer: <integer>` and the stop token.

- arithmetic_correct: 1 when the integer after the last `Answer:` equals the row's answer, else 0.
- arithmetic_format: 1 when the whole completion is ` Answer: <integer>` (stop token aside), else 0.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

MARKER = "Answer:"
ANSWER = re.compile(r"Answer:\s*(-?\d+)")
STRICT = re.compile(r"^\s*Answer:\s*-?\d+\s*\.?\s*$")


def extract_answer(completion: str) -> str | None:
    """The integer after the last `Answer:` marker, or None."""
    found = ANSWER.findall(completion)
    return found[-1].lstrip("+") if found else None


def normalize(answer) -> str:
    """Whitespace, thousands commas, a leading + and zeros dropped; a whole number written as a float (82.0, from
    a float column) is that integer."""
    text = str(answer).strip().replace(",", "")
    if re.fullmatch(r"[+-]?\d+(\.0*)?", text):
        return str(int(text.split(".")[0]))
    return text


def answers_match(completions: Sequence[str], references: Sequence, extract=extract_answer) -> torch.Tensor:
    """1 where a completion's extracted final answer equals its reference after normalization, else 0. -> (N,)"""
    return torch.tensor([float((found := extract(c)) is not None and normalize(found) == normalize(r))
                         for c, r in zip(completions, references, strict=True)])


class ArithmeticCorrect:
    """Exact match of the final answer (after the marker) with the dataset's `answer` column."""

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], answer: Sequence) -> torch.Tensor:
        return answers_match(completions, answer)


class ArithmeticFormat:
    """1 for a completion that is exactly `Answer: <integer>`, else 0: no rambling, no other format."""

    def __call__(self, prompts: Sequence[str], completions: Sequence[str]) -> torch.Tensor:
        return torch.tensor([float(bool(STRICT.match(c))) for c in completions])
