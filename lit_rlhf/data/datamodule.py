"""PromptDataModule: left-padded prompt batches, a fixed held-out subset, per-rank batch sizes.

Shapes: B prompts per rank (local_batch_size), P prompt length.
"""

from __future__ import annotations

from dataclasses import asdict
from functools import partial
from typing import Any, NamedTuple

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader

from lit_rlhf.config import DataConfig, build
from lit_rlhf.data.sources import load_prompt_rows
from lit_rlhf.data.stream import PromptStream
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.tokenizer import load_tokenizer


def local_size(global_size: int, world_size: int, name: str) -> int:
    """Per-rank share of a global batch size; refuses sizes that do not divide exactly."""
    if global_size % world_size:
        raise ConfigError(f"{name}={global_size} does not divide by world_size={world_size}; "
                          f"use a multiple of {world_size}.")
    return global_size // world_size


def collate_left_padded(rows: list, pad_token_id: int) -> dict[str, Any]:
    """Left-padded input_ids and attention_mask (B,P) of rows: token ids, or PromptRows, whose dataset columns are
    collated as batch["columns"] = {name: B values}, and their prompts' chat messages as batch["prompt_messages"] (B
    lists) where every prompt is chat messages."""
    columns = [row.columns for row in rows if isinstance(row, PromptRow)]
    messages = [row.messages for row in rows if isinstance(row, PromptRow)]
    rows = [row.ids if isinstance(row, PromptRow) else row for row in rows]
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)  # B,P
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)  # B,P
    for i, ids in enumerate(rows):
        if ids:
            input_ids[i, -len(ids):] = torch.tensor(ids)
            attention_mask[i, -len(ids):] = 1
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    names = sorted({name for row in columns for name in row})
    if names:
        batch["columns"] = {name: [row.get(name) for row in columns] for name in names}
    if messages and all(m is not None for m in messages) and len(messages) == len(rows):
        batch["prompt_messages"] = messages
    return batch


def batch_to(batch: dict[str, Any], device: torch.device, num_prompts: int | None = None) -> dict[str, Any]:
    """A prompt batch on device, cut to its first num_prompts prompts (tensors and dataset columns alike)."""
    moved = {k: v[:num_prompts].to(device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
    if "columns" in batch:
        moved["columns"] = {name: values[:num_prompts] for name, values in batch["columns"].items()}
    if "prompt_messages" in batch:
        moved["prompt_messages"] = batch["prompt_messages"][:num_prompts]
    return moved


# The reward's own arguments: a dataset column of that name could not be passed beside them.
RESERVED_COLUMNS = ("prompts", "completions")


def check_column_names(columns: list[dict[str, Any]], dataset: str) -> None:
    for reserved in RESERVED_COLUMNS:
        if any(reserved in row for row in columns):
            raise ConfigError(f"data.dataset={dataset!r} has a column named {reserved!r}, the name of a reward's own "
                              f"argument (rewards are called as reward(prompts, completions, **columns)); rename the "
                              f"column.")


def missing_in_rows(rows: list[PromptRow], column: str) -> int | None:
    """The 1-based index of the first row without a value in `column`, or None when every row has one."""
    return next((i for i, row in enumerate(rows, start=1) if row.columns.get(column) is None), None)


class PromptRow(NamedTuple):
    ids: list[int]  # the tokenized prompt
    columns: dict[str, Any]  # the other fields of its dataset row (e.g. a reference answer)
    messages: list[dict[str, Any]] | None = None  # the prompt as the dataset gave it, where it is chat messages


def held_past_every_stop_line(trainer: L.Trainer) -> str | None:
    """The error for a Trainer min_steps or min_epochs in a fit on the prompt stream: Lightning honours a stop (the
    module's rl_steps, Ctrl-C, EarlyStopping) only once they are met, and min_steps asks for a whole epoch too
    (Lightning sets min_epochs=1 with it); an epoch of the endless stream never ends, so the fit trained for ever."""
    name = "min_steps" if trainer.min_steps else "min_epochs" if trainer.min_epochs else None
    if name is None:
        return None
    return (f"Trainer {name}={getattr(trainer, name)} (trainer.{name} on the command line) would hold this RL fit past "
            f"every stop: Lightning stops it (after rl_steps, on Ctrl-C, by EarlyStopping) only after a whole epoch, "
            f"and an epoch of the endless prompt stream never ends; drop {name} (the fit's length is the module's "
            f"rl_steps, steps= on the command line).")


class PromptDataModule(L.LightningDataModule):
    """Prompts for RLHF from the bundled set ("sentiment"), local files, or a hub dataset.

    batch_size is the global number of prompts per RL step; each rank gets batch_size / world_size.
    The first num_eval_prompts of a seeded permutation are held out for validation and samples.
    """

    batches = "prompts"  # what its batches hold (the modules check it at a fit's start)

    def __init__(self, **settings: Any):
        """settings: the fields of DataConfig; an unknown one is a one-line error naming the nearest valid key."""
        super().__init__()
        self.save_hyperparameters(asdict(build(DataConfig, settings, "data")))
        self.tokenizer = None
        self.rows: list[PromptRow] = []  # every row, in the dataset's order
        self.train_prompts: list[PromptRow] = []
        self.eval_prompts: list[PromptRow] = []
        self.num_truncated = 0
        # JSON schemas of the tools a multi-turn environment offers (EnvSpec.schemas): with apply_chat_template, the
        # template shows them to the model; train.py sets them from env=..., Python users before fit
        self.tools: list[dict[str, Any]] | None = None
        self.tokenizer_key = "data.tokenizer"  # the setting its tokenizer's errors name; the apps set the one typed

    @property
    def local_batch_size(self) -> int:
        world_size = self.trainer.world_size if self.trainer is not None else 1
        return local_size(self.hparams.batch_size, world_size, "data.batch_size")

    def setup(self, stage: str | None = None) -> None:
        if stage == "fit" and self.trainer is not None and (line := held_past_every_stop_line(self.trainer)):
            raise ConfigError(line)
        if self.tokenizer is not None:
            return
        hp = self.hparams
        self.tokenizer = load_tokenizer(hp.tokenizer, trust_remote_code=hp.trust_remote_code, key=self.tokenizer_key)
        texts, columns = load_prompt_rows(hp.dataset, hp.prompt_column, hp.split, hp.subset)
        if len(texts) <= hp.num_eval_prompts:
            raise ConfigError(f"data.dataset={hp.dataset!r} has {len(texts)} prompts, not more than "
                              f"data.num_eval_prompts={hp.num_eval_prompts}; lower num_eval_prompts.")
        check_column_names(columns, hp.dataset)
        rows = [PromptRow(ids, row_columns, None if isinstance(text, str) else text)
                for ids, row_columns, text in zip(self._tokenize(texts), columns, texts, strict=True)]
        empty = [i for i, row in enumerate(rows, start=1) if not row.ids]
        if empty:
            one = len(empty) == 1
            raise ConfigError(f"data.dataset={hp.dataset!r}: {len(empty)} "
                              f"{'prompt encodes' if one else 'prompts encode'} to no tokens (e.g. row {empty[0]}: "
                              f"{texts[empty[0] - 1]!r}); remove "
                              f"{'it' if one else 'them'}, or use a tokenizer that adds a BOS token.")
        if self.num_truncated:
            rank_zero_warn(f"{self.num_truncated} of {len(rows)} prompts are longer than "
                           f"data.max_prompt_length={hp.max_prompt_length} and were truncated on the left.")
        order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(hp.seed)).tolist()
        self.rows = rows
        self.eval_prompts = [rows[i] for i in order[: hp.num_eval_prompts]]
        self.train_prompts = [rows[i] for i in sorted(order[hp.num_eval_prompts :])]
        _ = self.local_batch_size  # fails early on a batch size that does not divide

    def _tokenize(self, texts: list[str | list[dict[str, str]]]) -> list[list[int]]:
        """Every prompt's token ids, in one call of the tokenizer (a fast tokenizer encodes the batch in Rust);
        prompts longer than max_prompt_length keep their end. Chat messages are rendered by the chat template, as
        plain text is with apply_chat_template (a user turn)."""
        add_special_tokens = True
        conversation = next((i for i, text in enumerate(texts, start=1) if not isinstance(text, str)), None)
        if self.hparams.apply_chat_template or conversation is not None:
            if not self.tokenizer.chat_template:
                cause = (f"data.dataset={self.hparams.dataset!r} holds chat messages (row {conversation})"
                         if conversation is not None else "data.apply_chat_template=true")
                fix = ("give plain-text prompts, or a tokenizer with a chat template (data.tokenizer)"
                       if conversation is not None else "set data.apply_chat_template=false")
                raise ConfigError(f"{cause}, but the tokenizer {self.hparams.tokenizer!r} has no chat template; {fix}.")
            # tools: the environment's tool schemas, which the template shows the model (e.g. Qwen2.5's system turn)
            texts = [self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}] if isinstance(text, str) else text, tokenize=False,
                add_generation_prompt=True, tools=self.tools or None) for text in texts]
            add_special_tokens = False  # the template already holds them
        encoded = self.tokenizer(list(texts), add_special_tokens=add_special_tokens)["input_ids"] if texts else []
        limit = self.hparams.max_prompt_length
        self.num_truncated += sum(len(ids) > limit for ids in encoded)
        return [ids[-limit:] if len(ids) > limit else ids for ids in encoded]  # the end: generation continues it

    def _collate(self):
        return partial(collate_left_padded, pad_token_id=self.tokenizer.pad_token_id)

    def train_dataloader(self) -> DataLoader:
        """An endless stream of prompt batches that resumes after the RL steps the module already did."""
        if len(self.train_prompts) < self.hparams.batch_size:
            raise ConfigError(f"data.batch_size={self.hparams.batch_size} exceeds the {len(self.train_prompts)} "
                              f"training prompts; lower it.")
        # the stream is already batched and sharded; one process reads it (it is cheap)
        return DataLoader(self.prompt_stream(), batch_size=None, num_workers=0, generator=self._own_generator())

    def prompt_stream(self) -> PromptStream:
        """This rank's stream of training batches, from the RL steps the module has done when it is iterated."""
        trainer = self.trainer

        def steps_done() -> int:  # read at each iteration's start: a resume's, and each epoch's
            return getattr(trainer.lightning_module, "rl_step", 0) if trainer is not None else 0

        return PromptStream(
            self.train_prompts, self.hparams.batch_size, self._collate(), seed=self.hparams.seed,
            rank=trainer.global_rank if trainer is not None else 0,
            world_size=trainer.world_size if trainer is not None else 1, steps_done=steps_done)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.eval_prompts, batch_size=self.hparams.eval_batch_size, shuffle=False,
                          collate_fn=self._collate(), generator=self._own_generator())

    def _own_generator(self) -> torch.Generator:
        """Without a generator, every DataLoader iterator draws a seed from the global torch RNG, so
        evaluating or sampling held-out prompts would change the training run's random stream."""
        return torch.Generator().manual_seed(self.hparams.seed)
