"""CompletionDataModule: (prompt, completion) rows for supervised fine-tuning (train_sft.py), with a fixed held-out
split. The rows come from the sources preference pairs come from (a .jsonl/.csv/.parquet file, a hub dataset, or the
bundled `sentiment_pairs`, read with each pair's `chosen` side as the completion); texts are plain strings or chat
messages rendered with the tokenizer's chat template, and a plain-text completion ends with the tokenizer's EOS, as
in preference pairs. Rows may instead be plain texts (a `text` column, every token trained on), conversations (a
`messages` column, trained on their assistant turns: lit_rlhf/data/conversations.py), or token ids (TRL's
pre-tokenized form: `input_ids`, and `completion_mask` 1 on the tokens trained on), e.g. multi-turn episodes whose
tool results are context, not targets.

Shapes: B rows per batch, L sequence length (prompt + completion, right-padded).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from lit_rlhf.config.data import check_pair_lengths, named
from lit_rlhf.data.conversations import MESSAGES_COLUMN, TEXT_COLUMN, conversation_item, text_item
from lit_rlhf.data.epoch_shuffle import training_loader
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


def read_completion_rows(dataset: str | None, prompt_column: str = "prompt", split: str = "train",
                         subset: str | None = None) -> list[dict[str, Any]]:
    """The rows of `dataset`: (prompt, completion) texts, or token ids (tokenized_items)."""
    if dataset is None:
        raise ConfigError("data.dataset is not set; give a .jsonl, .csv or .parquet file (or a hub dataset) with "
                          "prompt and completion columns, or 'sentiment_pairs' (bundled).")
    rows = read_rows(dataset, None, split, subset, what="prompts and completions")  # each row's columns: below
    if dataset in BUNDLED_PAIRS:  # the bundled pairs as completions: each pair's chosen (the more positive) side
        rows = [{"completion": row["chosen"], **row} for row in rows]
    if not rows:
        raise ConfigError(f"data.dataset={dataset!r} holds no rows; give prompts and completions.")
    return rows


def load_completions(dataset: str | None, tokenizer: Any, prompt_column: str = "prompt",
                     completion_column: str = "completion", split: str = "train", subset: str | None = None,
                     rows: list[dict[str, Any]] | None = None) -> list[tuple[str, str]]:
    """The (prompt, completion) texts of `dataset` (or of its rows, already read), checked."""
    rows = read_completion_rows(dataset, prompt_column, split, subset) if rows is None else rows
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


def tokenized_items(rows: list[dict[str, Any]], dataset: str, vocab_size: int,
                    max_length: int) -> list[tuple[list[int], list[int]]]:
    """Rows given as token ids: (ids, mask) each, the first max_length tokens; `completion_mask` (1: trained on, 0:
    context) defaults to every token."""
    items = []
    for number, row in enumerate(rows, start=1):
        where = f"data.dataset={dataset!r}, row {number}"
        ids, mask = row.get("input_ids"), row.get("completion_mask")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) and
                                                           0 <= i < vocab_size for i in ids):  # true is not id 1
            raise ConfigError(f"{where}: 'input_ids' must be a non-empty list of token ids below the tokenizer's "
                              f"{vocab_size}; give every row the ids of data.tokenizer's vocabulary.")
        mask = [1] * len(ids) if mask is None else mask
        if not isinstance(mask, list) or len(mask) != len(ids) or any(m not in (0, 1) for m in mask):
            raise ConfigError(f"{where}: 'completion_mask' must be a list of 0/1, one per input_ids token "
                              f"({len(ids)}); give 1 on the tokens to train on, 0 on context.")
        ids, mask = ids[:max_length], [int(m) for m in mask[:max_length]]
        if not any(mask[1:]):  # the first token has no token before it to be predicted from
            raise ConfigError(f"{where}: no token to train on within data.max_length={max_length} (completion_mask "
                              f"is 0 after the first token); raise data.max_length or remove the row.")
        items.append((ids, mask))
    return items


class CompletionDataModule(L.LightningDataModule):
    """(prompt, completion) rows of `dataset`; `num_eval_rows` of them (a seeded draw) held out for validation."""

    batches = "completions"  # what its batches hold (the modules check it at a fit's start)

    def __init__(self, tokenizer: str, dataset: str | None = None, prompt_column: str = "prompt",
                 completion_column: str = "completion", split: str = "train", subset: str | None = None,
                 batch_size: int = 8, num_eval_rows: int = 64, max_length: int = 256, max_prompt_length: int = 128,
                 seed: int = 0, num_workers: int = 0):
        super().__init__()
        dataset, tokenizer = named(dataset, tokenizer)  # before save_hyperparameters, which reads them
        self.save_hyperparameters()
        check_pair_lengths({"batch_size": (batch_size, 1), "num_eval_rows": (num_eval_rows, 0)}, max_length,
                           max_prompt_length, "completion")
        self.tokenizer = None
        self.tokenizer_key = "data.tokenizer"  # the setting its tokenizer's errors name; the apps set the one typed
        # each (ids, prompt length), or (ids, mask) for token-id rows
        self.train_rows: list[tuple[list[int], int | list[int]]] = []
        self.eval_rows: list[tuple[list[int], int | list[int]]] = []

    def setup(self, stage: str | None = None) -> None:
        if self.train_rows:
            return
        hp = self.hparams
        self.tokenizer = load_checked_tokenizer(hp.tokenizer, key=self.tokenizer_key)
        ensure_pad_token(self.tokenizer)
        groups = self.read_groups()
        if len(groups) < 2:
            raise ConfigError(f"data.dataset={hp.dataset!r} holds {len(groups)} row; training needs at least 2 (one "
                              f"to train on, one held out); give more rows.")
        order = torch.randperm(len(groups), generator=torch.Generator().manual_seed(hp.seed)).tolist()
        held = min(hp.num_eval_rows, len(groups) - 1)
        self.eval_rows = [item for i in order[:held] for item in groups[i]]
        self.train_rows = [item for i in order[held:] for item in groups[i]]

    def read_groups(self) -> list[list]:
        """The file's rows as training items, in groups that the held-out draw keeps together (here one row each)."""
        hp = self.hparams
        rows = read_completion_rows(hp.dataset, hp.prompt_column, hp.split, hp.subset)
        if "input_ids" in rows[0]:  # token ids already
            items = tokenized_items(rows, hp.dataset, len(self.tokenizer), hp.max_length)
        elif hp.prompt_column not in rows[0] and (MESSAGES_COLUMN in rows[0] or TEXT_COLUMN in rows[0]):
            # conversations (trained on their assistant turns) or plain texts (on every token)
            column, item = ((MESSAGES_COLUMN, conversation_item) if MESSAGES_COLUMN in rows[0] else
                            (TEXT_COLUMN, text_item))
            items = [item(self.tokenizer, row.get(column), f"data.dataset={hp.dataset!r}, row {number}",
                          hp.max_length) for number, row in enumerate(rows, start=1)]
        else:
            texts = load_completions(hp.dataset, self.tokenizer, hp.prompt_column, hp.completion_column, rows=rows)
            items = [tokenize_pair_side(self.tokenizer, prompt, completion, hp.max_length, hp.max_prompt_length)
                     for prompt, completion in texts]
        return [[item] for item in items]

    def collate(self) -> partial:
        return partial(collate_sequences, pad_token_id=self.tokenizer.pad_token_id)

    def heldout_loader(self, items: list) -> DataLoader:
        return DataLoader(items, batch_size=self.hparams.batch_size, shuffle=False, collate_fn=self.collate(),
                          generator=torch.Generator().manual_seed(self.hparams.seed),
                          num_workers=self.hparams.num_workers)

    def train_dataloader(self) -> DataLoader:
        hp = self.hparams
        return training_loader(self.train_rows, self.collate(), hp.batch_size, hp.seed, hp.num_workers,
                               trainer=lambda: self.trainer)

    def val_dataloader(self) -> DataLoader | list:
        return self.heldout_loader(self.eval_rows) if self.eval_rows else []
