"""PreferenceDataModule: batches of tokenized preference pairs, with a fixed held-out split.

Shapes: B pairs per batch, L sequence length (prompt + response, right-padded).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader

from lit_rlhf.config.data import check_pair_lengths, named
from lit_rlhf.data.epoch_shuffle import training_loader
from lit_rlhf.data.preferences import collate_pairs, load_preference_pairs, tokenize_pair_side
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.tokenizer import ensure_pad_token, load_checked_tokenizer


class PreferenceDataModule(L.LightningDataModule):
    """(prompt, chosen, rejected[, margin]) rows of `dataset` (a .jsonl/.csv/.parquet file or a hub dataset);
    `num_eval_pairs` of them (a seeded draw) held out for validation."""

    batches = "preference pairs"  # what its batches hold (the modules check it at a fit's start)

    def __init__(self, tokenizer: str, dataset: str | None = None, prompt_column: str = "prompt",
                 chosen_column: str = "chosen", rejected_column: str = "rejected", margin_column: str | None = None,
                 split: str = "train", subset: str | None = None, batch_size: int = 8, num_eval_pairs: int = 64,
                 max_length: int = 256, max_prompt_length: int = 128, seed: int = 0, num_workers: int = 0):
        super().__init__()
        dataset, tokenizer = named(dataset, tokenizer)  # before save_hyperparameters, which reads them
        self.save_hyperparameters()
        check_pair_lengths({"batch_size": (batch_size, 1), "num_eval_pairs": (num_eval_pairs, 0)}, max_length,
                           max_prompt_length, "response")
        self.tokenizer = None
        self.tokenizer_key = "data.tokenizer"  # the setting its tokenizer's errors name; the apps set the one typed
        self.train_pairs: list[dict[str, Any]] = []
        self.eval_pairs: list[dict[str, Any]] = []

    def setup(self, stage: str | None = None) -> None:
        if self.train_pairs:
            return
        hp = self.hparams
        self.tokenizer = load_checked_tokenizer(hp.tokenizer, key=self.tokenizer_key)
        ensure_pad_token(self.tokenizer)
        pairs, identical = load_preference_pairs(hp.dataset, self.tokenizer, hp.prompt_column, hp.chosen_column,
                                                 hp.rejected_column, hp.margin_column, hp.split, hp.subset)
        if identical:
            rank_zero_warn(f"data.dataset={hp.dataset!r}: {identical} rows whose chosen equals rejected were left "
                           f"out (no preference to learn).")
        side = partial(tokenize_pair_side, self.tokenizer, max_length=hp.max_length,
                       max_prompt_length=hp.max_prompt_length)
        items = [{"chosen": side(p.prompt, p.chosen), "rejected": side(p.prompt, p.rejected), "margin": p.margin}
                 for p in pairs]
        order = torch.randperm(len(items), generator=torch.Generator().manual_seed(hp.seed)).tolist()
        if len(items) < 2:
            raise ConfigError(f"data.dataset={hp.dataset!r} holds {len(items)} usable pair; training needs at least 2 "
                              f"(one to train on, one held out); give more pairs.")
        held = min(hp.num_eval_pairs, len(items) - 1)
        if held < hp.num_eval_pairs:  # a small file: say what is held out, and what the rest leaves to train on
            rank_zero_warn(f"data.dataset={hp.dataset!r} holds {len(items)} pairs: {held} are held out (of "
                           f"data.num_eval_pairs={hp.num_eval_pairs}) and {len(items) - held} left to train on; "
                           f"lower data.num_eval_pairs or give more pairs.")
        self.eval_pairs = [items[i] for i in order[:held]]
        self.train_pairs = [items[i] for i in order[held:]]

    def heldout_loader(self, items: list) -> DataLoader:
        return DataLoader(items, batch_size=self.hparams.batch_size, shuffle=False,
                          collate_fn=partial(collate_pairs, pad_token_id=self.tokenizer.pad_token_id),
                          generator=torch.Generator().manual_seed(self.hparams.seed),
                          num_workers=self.hparams.num_workers)

    def train_dataloader(self) -> DataLoader:
        hp = self.hparams
        return training_loader(self.train_pairs, partial(collate_pairs, pad_token_id=self.tokenizer.pad_token_id),
                               hp.batch_size, hp.seed, hp.num_workers, trainer=lambda: self.trainer)

    def val_dataloader(self) -> DataLoader | list:
        return self.heldout_loader(self.eval_pairs) if self.eval_pairs else []
