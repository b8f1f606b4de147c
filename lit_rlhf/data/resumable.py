"""ResumableLoader: the shuffled training batches of the offline fits (train_sft.py, train_dpo.py,
train_reward_model.py), resumed exactly from a checkpoint written in the middle of an epoch or at its end.

A plain DataLoader restarts its epoch from the first batch on resume (Lightning warns "your dataloader is not
resumable"), so the resumed fit trained on the epoch's first batches twice and never on its last ones. This loader
is one Lightning checkpoints (`state_dict` / `load_state_dict`): it records its shuffling generator as it was when
the epoch began, and the batches trained on so far in that epoch; the first iteration after a resume replays them
from that state without yielding them, so the run continues with the very batch the interrupted one would have
drawn next, and later epochs shuffle as they would have. An uninterrupted run draws exactly what a plain DataLoader
with the same generator draws. Lightning hands a loader its state back only from a checkpoint written mid-epoch; the
data module's own state (OfflineFitData), which Lightning restores from any checkpoint, carries it at an epoch's end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader


def batches_trained_this_epoch(trainer) -> int:
    """The training batches the trainer has stepped on in its current epoch, from its optimizer steps (Lightning steps
    once per accumulate_grad_batches batches, and at an epoch's end on what is left)."""
    if trainer is None or not isinstance(trainer.num_training_batches, int):
        return 0
    accumulate = trainer.accumulate_grad_batches
    steps_per_epoch = math.ceil(trainer.num_training_batches / accumulate)
    trained = (trainer.global_step - trainer.current_epoch * steps_per_epoch) * accumulate
    return max(0, min(trained, trainer.num_training_batches))


class ResumableLoader(DataLoader):
    def __init__(self, *args: Any, trainer: Callable[[], Any] = lambda: None, **kwargs: Any):
        """A DataLoader (shuffle=True needs a generator); trainer: the fitting Trainer (None outside a fit), read when
        a checkpoint is written."""
        super().__init__(*args, **kwargs)
        self.trainer = trainer
        self.epoch_start_state = self.generator.get_state() if self.generator is not None else None
        self.replay: int | None = None  # after load_state_dict: the batches to draw without yielding

    def __iter__(self) -> Iterator:
        if self.replay is not None:  # resumed: the checkpointed epoch's start, and the batches it trained on
            self.generator.set_state(self.epoch_start_state)
            skipped, self.replay = self.replay, None
            iterator = self.iterate_from_epoch_start()
            if skipped >= len(self):  # written at the epoch's end: the next epoch, from where that one left it
                for _ in iterator:
                    pass
                return self.iterate_from_epoch_start()
            for _ in range(skipped):
                next(iterator)
            return iterator
        return self.iterate_from_epoch_start()

    def iterate_from_epoch_start(self) -> Iterator:
        if self.generator is not None:
            self.epoch_start_state = self.generator.get_state()
        return super().__iter__()

    def state_dict(self) -> dict[str, Any]:
        return {"epoch_start_generator": self.epoch_start_state,
                "batches_trained": batches_trained_this_epoch(self.trainer())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("epoch_start_generator") is not None and self.generator is not None:
            self.epoch_start_state = torch.as_tensor(state["epoch_start_generator"], dtype=torch.uint8)
        self.replay = int(state.get("batches_trained", 0))


class OfflineFitData(L.LightningDataModule):
    """What the offline fits' data modules share: their training batches (a ResumableLoader) and held-out batches (in
    order), from the settings batch_size, seed and num_workers; the training loader's state in the data module's."""

    train_loader: ResumableLoader | None = None
    loader_state: dict[str, Any] | None = None  # from the checkpoint resumed, until the training loader exists

    def loader(self, items: list, collate: Callable, shuffle: bool) -> ResumableLoader:
        hp = self.hparams
        return ResumableLoader(items, batch_size=hp.batch_size, shuffle=shuffle, collate_fn=collate,
                               generator=torch.Generator().manual_seed(hp.seed), num_workers=hp.num_workers,
                               trainer=lambda: self.trainer)

    def training_batches(self, items: list, collate: Callable) -> ResumableLoader:
        self.train_loader = self.loader(items, collate, shuffle=True)
        if self.loader_state is not None:
            self.train_loader.load_state_dict(self.loader_state)
            self.loader_state = None
        return self.train_loader

    def state_dict(self) -> dict[str, Any]:
        return {} if self.train_loader is None else {"train_loader": self.train_loader.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader_state = state.get("train_loader")
