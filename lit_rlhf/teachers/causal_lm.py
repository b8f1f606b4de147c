"""CausalLMTeacher: a frozen causal LM (a full model, or a peft adapter on a base) that scores the tokens the student
sampled, and the checks that it scores the student's vocabulary.

Shapes: N sequences, P prompt length, R response length.
"""

from __future__ import annotations

from typing import Any

import torch

from lit_rlhf.config.validation import check_flag, check_setting_number
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.forwards import batched_logprobs
from lit_rlhf.models.loading import from_pretrained, own_code_refused, resolve_dtype
from lit_rlhf.models.policy import fit_embeddings, load_causal_lm
from lit_rlhf.models.tokenizer import load_tokenizer, token_id_differences
from lit_rlhf.teachers.routed import RoutedTeachers


class CausalLMTeacher:
    """A frozen causal LM that scores the student's tokens.

    name_or_path: a folder or hub name with the student's tokenizer; adapter_path: a peft adapter on it (merged
    into the weights once loaded); dtype: the weights' dtype (float32, bfloat16, ...). forward_batch_size,
    logits_chunk_size and padding_free: how its no-grad forwards run, as the student's algo.* settings of the
    same names (the same values give the same logprobs for the same weights)."""

    def __init__(self, name_or_path: str, dtype: str | None = "float32", adapter_path: str | None = None,
                 trust_remote_code: bool = False, forward_batch_size: int | None = None,
                 logits_chunk_size: int | None = 1024, padding_free: bool = True):
        resolve_dtype(dtype, "teacher.dtype")
        for key, value in (("trust_remote_code", trust_remote_code), ("padding_free", padding_free)):
            check_flag(f"teacher.{key}", value)  # trust_remote_code=flase would run the folder's code
        for key, value in (("forward_batch_size", forward_batch_size), ("logits_chunk_size", logits_chunk_size)):
            check_setting_number(f"teacher.{key}", value, minimum=1, integer=True, optional=True)
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
    differ, missing = token_id_differences(tokenizer, own)
    if differ or missing:
        example = (differ or missing)[0]
        raise ConfigError(f"teacher.name_or_path={name_or_path!r} has another tokenizer than the student (e.g. token "
                          f"{example!r}: {len(differ)} tokens with other ids, {len(missing)} the student lacks); a "
                          f"teacher scores the student's token ids, so use a teacher of the student's model family.")
