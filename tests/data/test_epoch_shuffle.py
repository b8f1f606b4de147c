"""The offline fits' training batches (EpochShuffle) resume exactly from a checkpoint written in the middle of an
epoch, at its last batch, or at its end: the resumed fit sees the batches the uninterrupted one saw, in its order,
later epochs included; and an uninterrupted fit draws what a plain shuffled DataLoader draws."""

import lightning as L
import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.utils.data import DataLoader

from lit_rlhf.callbacks import CheckpointOnInterrupt
from lit_rlhf.data.epoch_shuffle import EpochShuffle, training_loader
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


class RecordsBatches(L.LightningModule):
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
def test_with_fewer_batches_an_epoch_and_accumulation_the_resume_is_exact_too(tmp_path):
    """limit_train_batches=4 of 6, accumulate_grad_batches=2: the checkpoint after optimizer step 3 (batch 6)."""
    settings = {"limit_train_batches": 4, "accumulate_grad_batches": 2}
    whole = fit(RecordsBatches(), Rows(), **settings)
    assert len(whole) == 4 * EPOCHS
    stopped = fit(RecordsBatches(), Rows(), [StopAfter(3, tmp_path / "stop.ckpt")], **settings)
    assert stopped == whole[:6]
    assert fit(RecordsBatches(), Rows(), ckpt_path=tmp_path / "stop.ckpt", **settings) == whole[6:]
