"""EpochShuffle: the order of the offline fits' training rows (train_sft.py, train_dpo.py, train_reward_model.py),
resumed exactly from a checkpoint written in the middle of an epoch or at its end.

A plain shuffled DataLoader starts its epoch anew on resume: the resumed fit would train on the epoch's first batches
twice and never on its last ones, and shuffle its later epochs otherwise. Here epoch e's order is the one a
DataLoader shuffled by a generator seeded `seed` draws in its e-th epoch (a test holds them equal, so an
uninterrupted fit trains on what such a loader gives), and iteration starts after the batches the trainer has
trained on: their number is read from the trainer's restored progress whenever iteration begins, never kept here,
so it does not matter which iterator Lightning takes after its restart.

With several ranks RankEpochShuffle deals each rank its share of the epoch as Lightning's DistributedSampler would
(shuffled by the seed and the epoch), and resumes the same way. It is a DistributedSampler, so Lightning keeps it
instead of putting its own in its place (whose resume would start the epoch anew). A Trainer told not to shard
(use_distributed_sampler=False) gets EpochShuffle on every rank: each reads every row, as with a plain loader.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from torch.utils.data import DataLoader, DistributedSampler, Sampler

# Lightning warns on every mid-epoch resume of a loader without state_dict/load_state_dict; this one needs none
NOT_RESUMABLE_WARNING = "You're resuming from a checkpoint that ended before the epoch ended"


class EpochShuffle(Sampler[int]):
    def __init__(self, num_rows: int, batch_size: int, seed: int,
                 batches_done: Callable[[], tuple[int, int]] = lambda: (0, 1)):
        """batches_done: (training batches trained so far in the fit, batches per epoch), read as iteration begins."""
        self.num_rows, self.batch_size, self.seed, self.batches_done = num_rows, batch_size, seed, batches_done

    def __len__(self) -> int:
        return self.num_rows

    def epoch_order(self, epoch: int) -> list[int]:
        """What DataLoader(shuffle=True, generator=Generator().manual_seed(seed)) draws in epoch `epoch` (0-based).
        Each of its epochs draws, from that one generator: the iterator's base seed for workers, the epoch's
        permutation, and (RandomSampler's remainder, once the epoch is read to its end) one more permutation."""
        generator = torch.Generator().manual_seed(self.seed)
        order = None
        for _ in range(epoch + 1):
            torch.empty((), dtype=torch.int64).random_(generator=generator)
            order = torch.randperm(self.num_rows, generator=generator)
            torch.randperm(self.num_rows, generator=generator)
        return order.tolist()

    def __iter__(self) -> Iterator[int]:
        epoch, skipped = resume_point(self.batches_done, self.batch_size)
        yield from self.epoch_order(epoch)[skipped:]


class RankEpochShuffle(DistributedSampler):
    def __init__(self, num_rows: int, batch_size: int, seed: int, num_replicas: int, rank: int,
                 batches_done: Callable[[], tuple[int, int]] = lambda: (0, 1)):
        """This rank's rows of each epoch: what DistributedSampler(shuffle=True, seed=seed) deals rank `rank` of
        `num_replicas` after set_epoch(e) (every rank trains on as many batches); batches_done as EpochShuffle's,
        counted in this rank's batches."""
        super().__init__(range(num_rows), num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
        self.batch_size, self.batches_done = batch_size, batches_done

    def __iter__(self) -> Iterator[int]:
        epoch, skipped = resume_point(self.batches_done, self.batch_size)
        self.set_epoch(epoch)  # the epoch Lightning sets too, read from the same progress
        yield from list(super().__iter__())[skipped:]


def resume_point(batches_done: Callable[[], tuple[int, int]], batch_size: int) -> tuple[int, int]:
    """(the epoch iteration begins in, how many of its rows were trained on already)."""
    done, per_epoch = batches_done()
    epoch, batch = divmod(done, max(per_epoch, 1))
    return epoch, batch * batch_size


def batches_done(trainer: Any, num_rows: int, batch_size: int) -> tuple[int, int]:
    """(training batches the fitting trainer has trained on, its batches per epoch); (0, 1) outside a fit. Lightning
    counts the batches in its restored progress; the epoch's length is its loader's, cut by limit_train_batches as
    Lightning cuts it (at the moment a restart iterates, the trainer's own count is not set yet)."""
    if trainer is None or trainer.state.fn != "fit":
        return 0, 1
    per_epoch = math.ceil(num_rows / batch_size)
    limit = trainer.limit_train_batches
    if isinstance(limit, int):
        per_epoch = min(per_epoch, limit)
    elif limit is not None and limit != 1.0:
        per_epoch = int(per_epoch * limit)
    return trainer.fit_loop.epoch_loop.batch_progress.total.processed, per_epoch


def shards_rows(trainer: Any) -> bool:
    """Whether the Trainer deals each rank its share of a loader's rows (its use_distributed_sampler, which Lightning
    keeps on its accelerator connector only)."""
    return getattr(getattr(trainer, "_accelerator_connector", None), "use_distributed_sampler", True)


def training_loader(items: list, collate: Callable, batch_size: int, seed: int, num_workers: int,
                    trainer: Callable[[], Any]) -> DataLoader:
    """The shuffled training batches of an offline fit (trainer: the data module's trainer, None before a fit)."""
    own = torch.Generator().manual_seed(seed)  # workers' base seeds drawn from it, never from the global generator
    warnings.filterwarnings("ignore", message=NOT_RESUMABLE_WARNING, category=PossibleUserWarning)
    fitting = trainer()
    sampler: Sampler[int]
    if fitting is not None and fitting.world_size > 1 and shards_rows(fitting):
        ranks = fitting.distributed_sampler_kwargs  # num_replicas and rank, as Lightning's own sampler takes them
        sampler = RankEpochShuffle(len(items), batch_size, seed, ranks["num_replicas"], ranks["rank"])
    else:
        sampler = EpochShuffle(len(items), batch_size, seed)
    rows = len(sampler)  # this rank's
    sampler.batches_done = lambda: batches_done(trainer(), rows, batch_size)
    return DataLoader(items, batch_size=batch_size, sampler=sampler, collate_fn=collate, generator=own,
                      num_workers=num_workers)
