"""PromptStream: the endless, resumable, rank-aware stream of training prompt batches.

Step s of training gets global batch s: data epoch e = s // steps_per_epoch is a permutation of the
prompts drawn from (seed, e), and batch s is its slice number s % steps_per_epoch (a partial last
batch is dropped). Rank r takes its contiguous share of each global batch, so the K samples of a
prompt stay on one rank. Because the position is computed from the number of RL steps already
trained whenever iteration starts, a resumed run continues exactly where the interrupted one stopped, epoch boundaries
included, whatever Lightning prefetched; so does a Trainer's next epoch (limit_train_batches with max_epochs), which
iterates the stream anew.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch.utils.data import IterableDataset


class PromptStream(IterableDataset):
    def __init__(self, prompts: list[list[int]], global_batch_size: int, collate: Callable, seed: int = 0,
                 rank: int = 0, world_size: int = 1, steps_done: Callable[[], int] = lambda: 0):
        """steps_done: the RL steps trained so far, read whenever iteration starts (the batch it yields first)."""
        self.prompts, self.global_batch_size, self.collate = prompts, global_batch_size, collate
        self.seed, self.rank, self.world_size, self.steps_done = seed, rank, world_size, steps_done
        self.local_batch_size = global_batch_size // world_size
        self.steps_per_epoch = len(prompts) // global_batch_size

    def epoch_order(self, data_epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + data_epoch)
        return torch.randperm(len(self.prompts), generator=generator).tolist()

    def global_batch(self, step: int) -> list[int]:
        """Prompt indices of global batch `step` (all ranks)."""
        data_epoch, index = divmod(step, self.steps_per_epoch)
        start = index * self.global_batch_size
        return self.epoch_order(data_epoch)[start : start + self.global_batch_size]

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        """This rank's prompt batch of RL step `step` (what the asynchronous producer reads ahead)."""
        share = self.global_batch(step)[self.rank * self.local_batch_size : (self.rank + 1) * self.local_batch_size]
        return self.collate([self.prompts[i] for i in share])

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        step = self.steps_done()
        while True:
            yield self.batch(step)
            step += 1
