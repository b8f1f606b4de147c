"""The offline fits' training batches (ResumableLoader) resume exactly from a checkpoint written in the middle of an
epoch, or at its end: the resumed fit sees the batches the uninterrupted one saw, in its order, epochs after
included, and an uninterrupted fit draws what a plain shuffled DataLoader draws."""

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from lit_rlhf.data.resumable import OfflineFitData

pytestmark = pytest.mark.integration  # runs a Trainer

ITEMS = list(range(22))  # 6 batches of 4 per epoch, the last one of 2
EPOCHS = 3


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


class Loaders(OfflineFitData):
    """As the offline fits' data modules build their training batches; plain=True: a plain shuffled DataLoader."""

    def __init__(self, plain: bool = False):
        super().__init__()
        self.save_hyperparameters()
        self.hparams.update(batch_size=4, seed=7, num_workers=0)

    def train_dataloader(self):
        if self.hparams.plain:
            return DataLoader(ITEMS, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(7))
        return self.training_batches(ITEMS, collate=torch.tensor)


class StopAfter(L.Callback):
    """A checkpoint after optimizer step `step` (at the end of the batch, or of the epoch the step ends), then stop:
    what CheckpointOnInterrupt and ModelCheckpoint write."""

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


def fit(module, datamodule, callbacks=(), ckpt_path=None):
    trainer = L.Trainer(max_epochs=EPOCHS, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu", callbacks=list(callbacks))
    trainer.fit(module, datamodule, ckpt_path=ckpt_path, weights_only=ckpt_path is not None)
    return module.seen


def test_an_uninterrupted_fit_draws_what_a_plain_shuffled_dataloader_draws():
    assert fit(RecordsBatches(), Loaders()) == fit(RecordsBatches(), Loaders(plain=True))


@pytest.mark.parametrize("step, at_epoch_end", [(2, False), (6 + 3, False), (6, True), (6, False)],
                         ids=["first epoch", "second epoch", "written at the epoch's end", "its last batch"])
def test_a_fit_resumed_from_its_checkpoint_sees_the_batches_the_uninterrupted_one_saw(step, at_epoch_end, tmp_path):
    whole = fit(RecordsBatches(), Loaders())
    assert len(whole) == 6 * EPOCHS
    stopped = fit(RecordsBatches(), Loaders(), [StopAfter(step, tmp_path / "stop.ckpt", at_epoch_end)])
    assert stopped == whole[:step]
    resumed = fit(RecordsBatches(), Loaders(), ckpt_path=tmp_path / "stop.ckpt")
    assert resumed == whole[step:]
