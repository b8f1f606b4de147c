"""What distillation asks of a teacher: the logprob it gives each token the student sampled.

A teacher is any object with

    logprobs(queries, query_mask, responses, response_mask, temperature, columns) -> (N,R)

the log-probabilities of the response tokens (zero outside response_mask) under the teacher, with its logits divided
by `temperature` as the student's are, and optional hooks (HOOKS). The teacher shares the student's tokenizer: the
token ids are scored as they are.

Shapes: N sequences, P prompt length, R response length.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch


class Teacher(Protocol):
    """What distillation asks of a teacher: log p_teacher of each response token given what precedes it, (N,R), zero
    outside response_mask; columns: the dataset columns of each sequence's prompt row.

    Optional hooks, each called where the teacher has it (call_hook): `load(tokenizer)` once with the student's
    tokenizer, `check_temperature(temperature)` and `check_rows(rows, dataset)` before training; a teacher whose
    `top_logprobs` is set also gives `scores(...) -> (logprobs, top ids, top logprobs)` (a served teacher's top K)."""

    def logprobs(self, queries: torch.Tensor, query_mask: torch.Tensor, responses: torch.Tensor,
                 response_mask: torch.Tensor, temperature: float, columns: dict[str, list] | None = None
                 ) -> torch.Tensor: ...


HOOKS = ("load", "check_temperature", "check_rows")


def call_hook(teacher: Teacher, name: str, *args: Any) -> None:
    """teacher.<name>(*args) where the teacher has that optional hook (HOOKS), else nothing."""
    assert name in HOOKS, name
    hook = getattr(teacher, name, None)
    if hook is not None:
        hook(*args)
