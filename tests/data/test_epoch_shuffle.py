"""The offline fits' training batches (EpochShuffle, RankEpochShuffle with several ranks) resume exactly from a
checkpoint written in the middle of an epoch, at its last batch, or at its end: the resumed fit sees the batches the
uninterrupted one saw, in its order, later epochs included; and an uninterrupted fit draws what a plain shuffled
DataLoader draws (with several ranks: what Lightning's DistributedSampler deals each rank)."""

import os

import lightning as L
import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.utils.data import DataLoader, DistributedSampler

from lit_rlhf.algos.pair_module import PairModule
from lit_rlhf.callbacks import CheckpointOnInterrupt, LastCheckpoint
from lit_rlhf.data.epoch_shuffle import EpochShuffle, RankEpochShuffle, training_loader
from tests.distributed.ranks import run_two_ranks
from tests.helpers import SignalAt

ITEMS = list(range(22))  # 6 batches of 4 per epoch, the last one of 2
EPOCHS = 3


def test_each_epoch_s_order_is_the_one_a_plain_shuffled_dataloader_draws_in_that_epoch():
    plain = DataLoader(ITEMS, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(7))
    epochs = [[i for batch in plain for i in batch.tolist()] for _ in range(EPOCHS)]
    assert len({tuple(e) for e in epochs}) == EPOCHS and all(sorted(e) == ITEMS for e in epochs)
    shuffle = EpochShuffle(len(ITEMS), batch_size=4, seed=7)
    assert [shuffle.epoch_order(e) for e in range(EPOCHS)] == epochs


def test_iteration_starts_after_the_batches_done_in_their_epoch():
    done = {"value": (6 + 2, 6)}  # second epoch, after its first two batches
    shuffle = EpochShuffle(len(ITEMS), batch_size=4, seed=7, batches_done=lambda: done["value"])
    assert list(shuffle) == shuffle.epoch_order(1)[8:]
    done["value"] = (12, 6)  # the second epoch's end: the third from its start
    assert list(shuffle) == shuffle.epoch_order(2)


def test_with_two_ranks_each_epoch_deals_each_rank_what_a_distributed_sampler_deals_it_and_resumes_alike():
    for rank in (0, 1):
        torchs = DistributedSampler(ITEMS, num_replicas=2, rank=rank, shuffle=True, seed=7)
        epochs = []
        for epoch in range(EPOCHS):
            torchs.set_epoch(epoch)
            epochs.append(list(torchs))
        assert len({tuple(e) for e in epochs}) == EPOCHS and all(len(e) == 11 for e in epochs)
        done = {"value": (0, 3)}  # 11 rows a rank: 3 batches of 4, the last one of 3
        ours = RankEpochShuffle(len(ITEMS), batch_size=4, seed=7, num_replicas=2, rank=rank,
                                batches_done=lambda done=done: done["value"])
        assert len(ours) == 11
        for epoch in range(EPOCHS):
            done["value"] = (3 * epoch, 3)
            assert list(ours) == epochs[epoch]
        done["value"] = (3 + 2, 3)  # the second epoch, after its first two batches
        assert list(ours) == epochs[1][8:]


class RecordsBatches(PairModule):
    """The offline fits' module base (its checkpoint hooks), recording the rows of each batch."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[list[int]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch.tolist())
        return (self.weight * batch.float().sum()).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


class Rows(L.LightningDataModule):
    """As the offline fits' data modules build their training batches; plain=True: a plain shuffled DataLoader."""

    def __init__(self, plain: bool = False):
        super().__init__()
        self.plain = plain

    def train_dataloader(self):
        if self.plain:
            return DataLoader(ITEMS, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(7))
        return training_loader(ITEMS, torch.tensor, batch_size=4, seed=7, num_workers=0, trainer=lambda: self.trainer)


class StopAfter(L.Callback):
    """A checkpoint after optimizer step `step` (at the end of the batch, or of the epoch the step ends), then stop:
    what CheckpointOnInterrupt on Ctrl-C and ModelCheckpoint write (SIGTERM's path: the test below)."""

    def __init__(self, step: int, path, at_epoch_end: bool = False):
        self.step, self.path, self.at_epoch_end = step, path, at_epoch_end

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.step and not self.at_epoch_end:
            trainer.save_checkpoint(self.path)
            trainer.should_stop = True

    def on_train_epoch_end(self, trainer, module):
        if trainer.global_step == self.step and self.at_epoch_end:
            trainer.save_checkpoint(self.path)
            trainer.should_stop = True


def fit(module, datamodule, callbacks=(), ckpt_path=None, **trainer_settings):
    settings = {"enable_checkpointing": False, **trainer_settings}
    trainer = L.Trainer(max_epochs=EPOCHS, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, accelerator="cpu", callbacks=list(callbacks), **settings)
    trainer.fit(module, datamodule, ckpt_path=ckpt_path, weights_only=ckpt_path is not None)
    return module.seen


@pytest.mark.integration  # runs a Trainer
@pytest.mark.floors  # leans on Lightning's restart
def test_an_uninterrupted_fit_draws_what_a_plain_shuffled_dataloader_draws():
    assert fit(RecordsBatches(), Rows()) == fit(RecordsBatches(), Rows(plain=True))


@pytest.mark.integration
@pytest.mark.floors
@pytest.mark.parametrize("step, at_epoch_end", [(2, False), (6 + 3, False), (6, True), (6, False)],
                         ids=["first epoch", "second epoch", "written at the epoch's end", "its last batch"])
def test_a_fit_resumed_from_its_checkpoint_sees_the_batches_the_uninterrupted_one_saw(step, at_epoch_end, tmp_path):
    whole = fit(RecordsBatches(), Rows())
    assert len(whole) == 6 * EPOCHS
    stopped = fit(RecordsBatches(), Rows(), [StopAfter(step, tmp_path / "stop.ckpt", at_epoch_end)])
    assert stopped == whole[:step]
    resumed = fit(RecordsBatches(), Rows(), ckpt_path=tmp_path / "stop.ckpt")
    assert resumed == whole[step:]


@pytest.mark.integration
@pytest.mark.floors
@pytest.mark.parametrize("step", [6, 6 + 3], ids=["at an epoch's last batch", "mid-epoch"])
def test_a_fit_stopped_by_sigterm_resumes_on_the_batches_the_uninterrupted_one_saw(step, tmp_path):
    """SIGTERM's checkpoint is written after the step's end (Lightning's SIGTERMException, CheckpointOnInterrupt)."""
    whole = fit(RecordsBatches(), Rows())
    stopped = RecordsBatches()
    with pytest.raises(SIGTERMException):
        fit(stopped, Rows(), [SignalAt(step, "SIGTERM"), CheckpointOnInterrupt(dirpath=str(tmp_path))],
            enable_checkpointing=True, default_root_dir=tmp_path)
    assert stopped.seen == whole[:step]
    assert fit(RecordsBatches(), Rows(), ckpt_path=tmp_path / "interrupted.ckpt") == whole[step:]


@pytest.mark.integration
@pytest.mark.floors
def test_a_fit_cut_by_max_steps_mid_epoch_resumes_into_the_rest_of_that_epoch_then_the_epochs_left(tmp_path):
    """The apps' last.ckpt of a fit that trainer.max_steps ended in its second epoch: Lightning counts that epoch
    done, and the resume would train 4 batches fewer."""
    whole = fit(RecordsBatches(), Rows())
    last = LastCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0)
    assert fit(RecordsBatches(), Rows(), [last], enable_checkpointing=True, max_steps=6 + 2) == whole[:8]
    assert fit(RecordsBatches(), Rows(), ckpt_path=tmp_path / "last.ckpt") == whole[8:]


@pytest.mark.integration
@pytest.mark.floors
def test_with_fewer_batches_an_epoch_and_accumulation_the_resume_is_exact_too(tmp_path):
    """limit_train_batches=4 of 6, accumulate_grad_batches=2: the checkpoint after optimizer step 3 (batch 6)."""
    settings = {"limit_train_batches": 4, "accumulate_grad_batches": 2}
    whole = fit(RecordsBatches(), Rows(), **settings)
    assert len(whole) == 4 * EPOCHS
    stopped = fit(RecordsBatches(), Rows(), [StopAfter(3, tmp_path / "stop.ckpt")], **settings)
    assert stopped == whole[:6]
    assert fit(RecordsBatches(), Rows(), ckpt_path=tmp_path / "stop.ckpt", **settings) == whole[6:]


RANK_ENVIRONMENT = ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PL_GLOBAL_SEED")


def two_rank_fits(rank: int, init_method: str, out: str) -> None:
    """Lightning's DDP on this rank of a process group started outside it (as torchrun starts ranks): an
    uninterrupted fit of each loader, one stopped mid-epoch and its resume."""
    saved = {name: os.environ.get(name) for name in RANK_ENVIRONMENT}
    os.environ.update(LOCAL_RANK=str(rank), NODE_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=init_method.rsplit(":", 1)[1], PL_GLOBAL_SEED="7")  # Lightning's sampler's seed
    torch.distributed.init_process_group("gloo", init_method=init_method, rank=rank, world_size=2)
    ddp = {"strategy": "ddp", "devices": 2}
    try:
        seen = {"whole": fit(RecordsBatches(), Rows(), **ddp), "plain": fit(RecordsBatches(), Rows(plain=True), **ddp),
                "stopped": fit(RecordsBatches(), Rows(), [StopAfter(3 + 2, f"{out}/stop.ckpt")], **ddp)}
        seen["resumed"] = fit(RecordsBatches(), Rows(), ckpt_path=f"{out}/stop.ckpt", **ddp)
        seen["unsharded"] = fit(RecordsBatches(), Rows(), **ddp, use_distributed_sampler=False)
        torch.save(seen, f"{out}/rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.mark.integration
@pytest.mark.multi_rank  # starts a second rank
def test_with_two_ranks_a_fit_resumed_mid_epoch_sees_on_each_rank_the_batches_the_uninterrupted_one_saw(tmp_path):
    run_two_ranks(two_rank_fits, str(tmp_path))
    ranks = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=True) for rank in (0, 1)]
    for seen in ranks:
        assert len(seen["whole"]) == 3 * EPOCHS and seen["whole"] == seen["plain"]  # Lightning's own sampler's
        assert seen["stopped"] == seen["whole"][:5]
        assert seen["resumed"] == seen["whole"][5:]
    for epoch in range(EPOCHS):  # each rank its own half of every epoch (22 rows: 11 a rank)
        halves = [{i for batch in seen["whole"][3 * epoch:3 * epoch + 3] for i in batch} for seen in ranks]
        assert not halves[0] & halves[1] and halves[0] | halves[1] == set(ITEMS)
    one_rank = fit(RecordsBatches(), Rows())
    for seen in ranks:  # a Trainer told not to shard: every rank reads every row, as one process does
        assert seen["unsharded"] == one_rank
    # the 2-rank checkpoint resumed on one rank: not exact, and said
    with pytest.warns(UserWarning, match=r"written by a fit on 2 rank\(s\) and this one runs on 1: .* resume on 2"):
        fit(RecordsBatches(), Rows(), ckpt_path=tmp_path / "stop.ckpt")
