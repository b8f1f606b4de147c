"""RoutedTeachers: several teachers, each sequence scored by the one its dataset row names."""

from __future__ import annotations

from typing import Any

import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.teachers.protocol import call_hook
from lit_rlhf.terminal import printable


class RoutedTeachers:
    """Several teachers: each sequence is scored by the teacher its dataset row names in `column` (e.g.
    data_source), as verl's multi-teacher distillation routes them. teachers: {name: teacher}."""

    def __init__(self, teachers: dict[str, Any], column: str = "data_source"):
        if not teachers:
            raise ConfigError("teacher.teachers is empty: give {name: teacher} for every value of the routing column.")
        for name, teacher in teachers.items():
            if not callable(getattr(teacher, "logprobs", None)):
                given = printable(repr(teacher)[:120], one_line=True)
                raise ConfigError(f"teacher.teachers.{name}={given} is not a teacher; give a teacher config, "
                                  f"e.g. teacher.teachers.{name}={{_target_: lit_rlhf.teachers.CausalLMTeacher, "
                                  f"name_or_path: <folder>}} (docs/distillation.md).")
        self.teachers, self.column = dict(teachers), column

    def load(self, tokenizer: Any) -> None:
        for teacher in self.teachers.values():
            call_hook(teacher, "load", tokenizer)

    def check_temperature(self, temperature: float) -> None:
        for teacher in self.teachers.values():
            call_hook(teacher, "check_temperature", temperature)

    def check_rows(self, rows: list, dataset: str) -> None:
        """Before training: every prompt row names a configured teacher in the routing column."""
        for number, row in enumerate(rows, start=1):
            value = row.columns.get(self.column)
            if value is None:
                raise ConfigError(f"routed teachers read the dataset column {self.column!r}, which data.dataset="
                                  f"{dataset!r} row {number} does not have; give every row one or set "
                                  f"teacher.column.")
            if str(value) not in self.teachers:
                raise ConfigError(f"data.dataset={dataset!r} row {number} routes to teacher {str(value)!r}, which is "
                                  f"not configured (teachers: {sorted(self.teachers)}); add it under "
                                  f"teacher.teachers.")

    def routes(self, columns: dict[str, list] | None, n: int) -> list[str]:
        """The teacher of each of the N sequences, by its row's column."""
        values = (columns or {}).get(self.column)
        if values is None:
            raise ConfigError(f"routed teachers read the dataset column {self.column!r}, which the prompts' rows do "
                              f"not have; use data with that column or set teacher.column.")
        unknown = sorted({str(v) for v in values} - set(self.teachers))
        if unknown:
            raise ConfigError(f"the dataset column {self.column!r} names {unknown[0]!r}, which no teacher serves "
                              f"(teachers: {sorted(self.teachers)}); add a teacher for it under teacher.teachers.")
        return [str(v) for v in values[:n]]

    def logprobs(self, queries: torch.Tensor, query_mask: torch.Tensor, responses: torch.Tensor,
                 response_mask: torch.Tensor, temperature: float, columns: dict[str, list] | None = None
                 ) -> torch.Tensor:
        routes = self.routes(columns, len(responses))
        out = torch.zeros(responses.shape, dtype=torch.float32, device=responses.device)  # N,R
        for name, teacher in self.teachers.items():
            rows = torch.tensor([i for i, route in enumerate(routes) if route == name], dtype=torch.long,
                                device=responses.device)
            if len(rows):
                scored = teacher.logprobs(queries[rows], query_mask[rows], responses[rows], response_mask[rows],
                                          temperature, {k: [v[i] for i in rows.tolist()] for k, v in columns.items()})
                out[rows] = scored.to(out.dtype)
        return out
