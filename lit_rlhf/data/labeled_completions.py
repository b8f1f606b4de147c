"""LabeledCompletionDataModule: (prompt, completion, label) rows for KTO (train_kto.py): each completion marked
desirable (label true) or undesirable (false), unpaired. A file of preference pairs (prompt, chosen, rejected) is read
as two rows per pair, the chosen one desirable and the rejected one not (TRL's unpair_preference_dataset); the bundled
`sentiment_pairs` are read so. Texts are plain strings or chat messages, as in preference pairs and SFT rows.

Each batch also holds its KL rows, from which KTO estimates the policy's KL to the reference: row i's prompt with row
i-1's completion (the completions rotated by one within the batch, as TRL's KTO builds them), so the mismatched
completions are the batch's own, each after another prompt.

Shapes: B rows per batch, L sequence length; the KL rows (B,L') beside them.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from lit_rlhf.data.completion_datamodule import CompletionDataModule, load_completions
from lit_rlhf.data.preferences import collate_sequences, read_rows, tokenize_pair_side
from lit_rlhf.errors import ConfigError

# a labelled row: (ids, prompt length), desirable
LabeledItem = tuple[tuple[list[int], int], bool]


def unpaired(rows: list[dict[str, Any]], chosen_column: str, rejected_column: str,
             completion_column: str, label_column: str) -> list[list[dict[str, Any]]]:
    """The file's rows in groups: a pair's two labelled rows (chosen desirable, rejected not), or one labelled row."""
    if chosen_column in rows[0] and rejected_column in rows[0] and label_column not in rows[0]:
        return [[{**row, completion_column: row[chosen_column], label_column: True},
                 {**row, completion_column: row[rejected_column], label_column: False}] for row in rows]
    return [[row] for row in rows]


def row_label(value: Any, where: str, label_column: str) -> bool:
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise ConfigError(f"{where}: {label_column!r} is {str(value)[:40]!r}; give true (a desirable completion) or false "
                      f"(an undesirable one), or 1/0.")


def collate_labeled(items: list[LabeledItem], pad_token_id: int, max_length: int) -> dict[str, torch.Tensor]:
    """The rows (B,L), their labels (B, bool), and the KL rows: row i's prompt with row i-1's completion (B,L'), the
    first max_length tokens of each."""
    sequences = [sequence for sequence, _ in items]
    batch = collate_sequences(sequences, pad_token_id)
    batch["label"] = torch.tensor([label for _, label in items], dtype=torch.bool)
    completions = [ids[prompt:] for ids, prompt in sequences]
    rotated = completions[-1:] + completions[:-1]
    kl_rows = [((ids[:prompt] + completion)[:max_length], prompt)
               for (ids, prompt), completion in zip(sequences, rotated, strict=True)]
    batch.update({f"kl_{key}": value for key, value in collate_sequences(kl_rows, pad_token_id).items()})
    return batch


class LabeledCompletionDataModule(CompletionDataModule):
    """(prompt, completion, label) rows, or preference pairs as two rows each; `num_eval_rows` of the file's rows (a
    pair: both of its rows) held out, a seeded draw."""

    batches = "labelled completions"  # what its batches hold (the modules check it at a fit's start)

    def __init__(self, tokenizer: str, dataset: str | None = None, prompt_column: str = "prompt",
                 completion_column: str = "completion", label_column: str = "label", chosen_column: str = "chosen",
                 rejected_column: str = "rejected", split: str = "train", subset: str | None = None,
                 batch_size: int = 8, num_eval_rows: int = 64, max_length: int = 256, max_prompt_length: int = 128,
                 seed: int = 0, num_workers: int = 0):
        super().__init__(tokenizer, dataset, prompt_column, completion_column, split, subset, batch_size,
                         num_eval_rows, max_length, max_prompt_length, seed, num_workers)
        self.train_rows: list[LabeledItem] = []
        self.eval_rows: list[LabeledItem] = []

    def read_groups(self) -> list[list[LabeledItem]]:
        """The file's rows as labelled items, a pair's two rows in one group (held out together)."""
        hp = self.hparams
        if hp.dataset is None:
            raise ConfigError("data.dataset is not set; give a .jsonl, .csv or .parquet file (or a hub dataset) with "
                              "prompt, completion and label columns (or preference pairs), or 'sentiment_pairs' "
                              "(bundled).")
        rows = read_rows(hp.dataset, None, hp.split, hp.subset, what="labelled completions")
        if not rows:
            raise ConfigError(f"data.dataset={hp.dataset!r} holds no rows; give labelled completions.")
        groups = unpaired(rows, hp.chosen_column, hp.rejected_column, hp.completion_column, hp.label_column)
        items = []
        for number, group in enumerate(groups, start=1):
            where = f"data.dataset={hp.dataset!r}, row {number}"
            if hp.label_column not in group[0]:
                raise ConfigError(f"{where}: no {hp.label_column!r} column (it has {sorted(group[0])}); set "
                                  f"data.label_column to the name your file uses, or give preference pairs "
                                  f"(data.chosen_column, data.rejected_column).")
            labels = [row_label(row[hp.label_column], where, hp.label_column) for row in group]
            texts = load_completions(hp.dataset, self.tokenizer, hp.prompt_column, hp.completion_column, rows=group)
            items.append([(tokenize_pair_side(self.tokenizer, prompt, completion, hp.max_length,
                                              hp.max_prompt_length), label)
                          for (prompt, completion), label in zip(texts, labels, strict=True)])
        return items

    def collate(self) -> partial:
        return partial(collate_labeled, pad_token_id=self.tokenizer.pad_token_id, max_length=self.hparams.max_length)
