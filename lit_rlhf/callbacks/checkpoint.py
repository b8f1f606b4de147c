"""LastCheckpoint: Lightning's ModelCheckpoint whose last.ckpt always holds the final step."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint


class LastCheckpoint(ModelCheckpoint):
    """ModelCheckpoint (Lightning 2.6) writes last.ckpt at train end only if no last.ckpt was written
    before, so a 150-step run saving every 100 steps kept step 100 as "last". This one rewrites it
    whenever the final step has not been saved yet."""

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self.save_last and self._last_global_step_saved != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        else:
            super().on_train_end(trainer, module)
