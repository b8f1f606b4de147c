"""Teachers for on-policy distillation: the logprob a teacher gives each token the student sampled.

A teacher is any object with

    logprobs(queries, query_mask, responses, response_mask, temperature, columns) -> (N,R)

the log-probabilities of the response tokens (zero outside response_mask) under the teacher, with its logits divided
by `temperature` as the student's are, and, optionally, `load(tokenizer)`, called once the student's tokenizer is
loaded. The teacher shares the student's tokenizer: the token ids are scored as they are.

- CausalLMTeacher: a causal LM folder or hub name (a full model, or a peft adapter on a base), frozen.
- RoutedTeachers: several teachers, each row of the data scored by the one its column names.

Shapes: N sequences, P prompt length, R response length.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.models.forwards import batched_logprobs
from lit_rlhf.models.loading import from_pretrained, own_code_refused
from lit_rlhf.models.policy import fit_embeddings, load_causal_lm
from lit_rlhf.models.tokenizer import load_tokenizer
from lit_rlhf.terminal import printable


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


class CausalLMTeacher:
    """A frozen causal LM that scores the student's tokens.

    name_or_path: a folder or hub name with the student's tokenizer; adapter_path: a peft adapter on it (merged
    into the weights once loaded); dtype: the weights' dtype (float32, bfloat16, ...). forward_batch_size,
    logits_chunk_size and padding_free: how its no-grad forwards run, as the student's algo.* settings of the
    same names (the same values give the same logprobs for the same weights)."""

    def __init__(self, name_or_path: str, dtype: str | None = "float32", adapter_path: str | None = None,
                 trust_remote_code: bool = False, forward_batch_size: int | None = None,
                 logits_chunk_size: int | None = 1024, padding_free: bool = True):
        self.name_or_path, self.dtype, self.adapter_path = name_or_path, dtype, adapter_path
        self.trust_remote_code = trust_remote_code
        self.forward_batch_size, self.logits_chunk_size, self.padding_free = (forward_batch_size, logits_chunk_size,
                                                                              padding_free)
        self.model: torch.nn.Module | None = None
        self.pad_token_id: int | None = None

    def load(self, tokenizer: Any, empty: bool = False) -> None:
        """Loads the weights once, frozen, and checks that the teacher reads the student's token ids. empty: with
        placeholder weights that each rank fills with its shards (trainer=fsdp2's sharded loading; a teacher with
        an adapter loads whole, to merge it)."""
        if self.model is not None:
            return
        check_same_vocabulary(self.name_or_path, tokenizer, self.trust_remote_code)
        with own_code_refused("teacher.name_or_path", self.name_or_path):
            model = load_causal_lm(self.name_or_path, "teacher.name_or_path", self.dtype, self.trust_remote_code,
                                   empty=empty and self.adapter_path is None)
        check_rows_cover_the_students_tokens(model, tokenizer, self.name_or_path)
        fit_embeddings(model, tokenizer, "teacher.name_or_path")  # the student's added pad token, if any
        if self.adapter_path is not None:
            from peft import PeftModel

            model = from_pretrained(lambda path: PeftModel.from_pretrained(model, path), self.adapter_path,
                                    "adapter", cache_first=False, errors=(OSError, ValueError),
                                    key="teacher.adapter_path").merge_and_unload()
        self.model = model.eval().requires_grad_(False)
        self.pad_token_id = tokenizer.pad_token_id if self.padding_free else None

    @torch.no_grad()
    def logprobs(self, queries: torch.Tensor, query_mask: torch.Tensor, responses: torch.Tensor,
                 response_mask: torch.Tensor, temperature: float, columns: dict[str, list] | None = None
                 ) -> torch.Tensor:
        """log p_teacher of each response token given what precedes it. -> (N,R), zero outside response_mask"""
        return batched_logprobs(self.model_on(queries.device), queries, query_mask, responses, response_mask,
                                temperature, self.forward_batch_size, self.logits_chunk_size, self.pad_token_id)

    def model_on(self, device: torch.device) -> torch.nn.Module:
        """The loaded model, on `device` and in eval mode, for a forward."""
        if self.model is None:
            raise ConfigError("the teacher was not loaded: a module loads it with the student (Sampler.attach).")
        if next(self.model.parameters()).device != device:
            self.model.to(device)
        self.model.eval()  # registered in the module under trainer=fsdp2, whose train() reaches it
        return self.model


def loaded_teachers(teacher: Any) -> list[CausalLMTeacher]:
    """The causal LMs a teacher loads (itself, or a RoutedTeachers' parts): what trainer=fsdp2 shards."""
    parts = teacher.teachers.values() if isinstance(teacher, RoutedTeachers) else [teacher]
    return [part for part in parts if isinstance(part, CausalLMTeacher)]


def check_rows_cover_the_students_tokens(model: torch.nn.Module, tokenizer: Any, name_or_path: str) -> None:
    """The teacher has a row (a logit) for every token the student may sample; only the pad token lit_rlhf adds to a
    tokenizer without one (never sampled, never scored) may be added to its embeddings."""
    rows = model.get_input_embeddings().num_embeddings
    lacking = [i for i in range(rows, len(tokenizer)) if i != tokenizer.pad_token_id]
    if lacking:
        raise ConfigError(f"teacher.name_or_path={name_or_path!r} has {rows} token embeddings and the student's "
                          f"tokenizer {len(tokenizer)} tokens: it has no logit for the {len(lacking)} ids from "
                          f"{lacking[0]} on, which the student may sample; use a teacher of the student's vocabulary.")


def check_teacher_vocabulary_size(teacher: Any, student: torch.nn.Module) -> None:
    """Each loaded teacher's logits are over as many tokens as the student's: a teacher with more (e.g. embeddings
    resized for added tokens) spreads its probability over ids the student never samples, and its logprobs of the
    student's tokens are not the distribution the student is pulled towards."""
    rows = student.get_input_embeddings().num_embeddings
    for part in loaded_teachers(teacher):
        theirs = part.model.get_input_embeddings().num_embeddings
        if theirs != rows:
            raise ConfigError(f"teacher.name_or_path={part.name_or_path!r} has {theirs} token embeddings (logits) "
                              f"and the student {rows}: the teacher's distribution is over another vocabulary; use a "
                              f"teacher whose vocabulary is the student's (the same model family and embedding size).")


def check_same_vocabulary(name_or_path: str, tokenizer: Any, trust_remote_code: bool) -> None:
    """The teacher's own tokenizer (when its folder has one) maps every token to the student's id."""
    try:
        with own_code_refused("teacher.name_or_path", name_or_path):
            own = load_tokenizer(name_or_path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        return  # weights only: the ids are the student's by the user's word
    student, teacher = tokenizer.get_vocab(), own.get_vocab()
    differ = sorted(token for token in set(student) & set(teacher) if student[token] != teacher[token])
    missing = sorted(set(teacher) - set(student))
    if differ or missing:
        example = (differ or missing)[0]
        raise ConfigError(f"teacher.name_or_path={name_or_path!r} has another tokenizer than the student (e.g. token "
                          f"{example!r}: {len(differ)} tokens with other ids, {len(missing)} the student lacks); a "
                          f"teacher scores the student's token ids, so use a teacher of the student's model family.")


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
                                  f"e.g. teacher.teachers.{name}={{_target_: lit_rlhf.models.teacher.CausalLMTeacher, "
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
