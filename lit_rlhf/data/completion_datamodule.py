"""CompletionDataModule: (prompt, completion) rows for supervised fine-tuning (train_sft.py), with a fixed held-out
split. The rows come from the sources preference pairs come from (a .jsonl/.csv/.parquet file, a hub dataset, or the
bundled `sentiment_pairs`, read with each pair's `chosen` side as the completion); texts are plain strings or chat
messages rendered with the tokenizer's chat template, and a plain-text completion ends with the tokenizer's EOS, as
in preference pairs.

Shapes: B rows per batch, L sequence length (prompt + completion, right-padded).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from lit_rlhf.data.preferences import (
    BUNDLED_PAIRS,
    as_text,
    collate_sequences,
    read_rows,
    tokenize_pair_side,
    with_eos,
)
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.tokenizer import ensure_pad_token, load_checked_tokenizer


def load_completions(dataset: str | None, tokenizer: Any, prompt_column: str = "prompt",
                     completion_column: str = "completion", split: str = "train",
                     subset: str | None = None) -> list[tuple[str, str]]:
    """The (prompt, completion) texts of `dataset`, checked."""
    if dataset is None:
        raise ConfigError("data.dataset is not set; give a .jsonl, .csv or .parquet file (or a hub dataset) with "
                          "prompt and completion columns, or 'sentiment_pairs' (bundled).")
    rows = read_rows(dataset, prompt_column, split, subset, what="prompts and completions")
    if dataset in BUNDLED_PAIRS:  # the bundled pairs as completions: each pair's chosen (the more positive) side
        rows = [{"completion": row["chosen"], **row} for row in rows]
    if not rows:
        raise ConfigError(f"data.dataset={dataset!r} holds no rows; give prompts and completions.")
    texts = []
    for number, row in enumerate(rows, start=1):
        where = f"data.dataset={dataset!r}, row {number}"
        for column, key in ((prompt_column, "prompt_column"), (completion_column, "completion_column")):
            if column not in row:
                raise ConfigError(f"{where}: no {column!r} column (it has {sorted(row)}); set data.{key} to the name "
                                  f"your file uses.")
        prompt = as_text(row[prompt_column], tokenizer, f"{where} {prompt_column!r}", generation_prompt=True)
        completion = as_text(row[completion_column], tokenizer, f"{where} {completion_column!r}")
        if not completion.strip():
            raise ConfigError(f"{where}: {completion_column!r} is empty; give every row a completion, or remove it.")
        texts.append((prompt, with_eos(completion, row[completion_column], tokenizer)))
    return texts


class CompletionDataModule(L.LightningDataModule):
    """(prompt, completion) rows of `dataset`; `num_eval_rows` of them (a seeded draw) held out for validation."""

    def __init__(self, tokenizer: str, dataset: str | None = None, prompt_column: str = "prompt",
                 completion_column: str = "completion", split: str = "train", subset: str | None = None,
                 batch_size: int = 8, num_eval_rows: int = 64, max_length: int = 256, max_prompt_length: int = 128,
                 seed: int = 0, num_workers: int = 0):
        super().__init__()
        self.save_hyperparameters()
        for name, minimum in (("batch_size", 1), ("num_eval_rows", 0), ("max_prompt_length", 1)):
            value = getattr(self.hparams, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ConfigError(f"data.{name}={value!r} must be a whole number >= {minimum}.")
        if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length <= max_prompt_length:
            raise ConfigError(f"data.max_length={max_length!r} must exceed data.max_prompt_length={max_prompt_length} "
                              f"(the completion needs room); raise data.max_length.")
        self.tokenizer = None
        self.train_rows: list[tuple[list[int], int]] = []
        self.eval_rows: list[tuple[list[int], int]] = []

    def setup(self, stage: str | None = None) -> None:
        if self.train_rows:
            return
        hp = self.hparams
        self.tokenizer = load_checked_tokenizer(hp.tokenizer, key="data.tokenizer")
        ensure_pad_token(self.tokenizer)
        texts = load_completions(hp.dataset, self.tokenizer, hp.prompt_column, hp.completion_column, hp.split,
                                 hp.subset)
        items = [tokenize_pair_side(self.tokenizer, prompt, completion, hp.max_length, hp.max_prompt_length)
                 for prompt, completion in texts]
        if len(items) < 2:
            raise ConfigError(f"data.dataset={hp.dataset!r} holds {len(items)} row; training needs at least 2 (one to "
                              f"train on, one held out); give more rows.")
        order = torch.randperm(len(items), generator=torch.Generator().manual_seed(hp.seed)).tolist()
        held = min(hp.num_eval_rows, len(items) - 1)
        self.eval_rows = [items[i] for i in order[:held]]
        self.train_rows = [items[i] for i in order[held:]]

    def _loader(self, items: list, shuffle: bool) -> DataLoader:
        return DataLoader(items, batch_size=self.hparams.batch_size, shuffle=shuffle,
                          collate_fn=partial(collate_sequences, pad_token_id=self.tokenizer.pad_token_id),
                          generator=torch.Generator().manual_seed(self.hparams.seed),
                          num_workers=self.hparams.num_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_rows, shuffle=True)

    def val_dataloader(self) -> DataLoader | list:
        return self._loader(self.eval_rows, shuffle=False) if self.eval_rows else []
