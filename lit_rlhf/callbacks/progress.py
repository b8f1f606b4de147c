"""RLStepsProgressBar: Lightning's rich progress bar counting RL steps, with the score and the KL."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar


class RLStepsProgressBar(RichProgressBar):
    """Lightning counts optimizer steps and epochs, neither of which an RLHF run has one of per RL step:
    this bar shows RL steps done / requested (a resumed run starts where it stopped) and the last step's
    score and KL (the `score` and `kl` progress-bar metrics of RLHFModule)."""

    @property
    def total_train_batches(self) -> int | float:
        total = getattr(self.trainer.lightning_module, "total_rl_steps", lambda: None)()
        return super().total_train_batches if total is None else total

    def _get_train_description(self, current_epoch: int) -> str:
        return f"{'RL steps':{len(self.validation_description)}}"

    def on_train_epoch_start(self, trainer: L.Trainer, module) -> None:
        super().on_train_epoch_start(trainer, module)
        self._update(self.train_progress_bar_id, getattr(module, "rl_step", 0))

    def on_train_batch_end(self, trainer: L.Trainer, module, outputs, batch, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, module, outputs, batch, batch_idx)
        self._update(self.train_progress_bar_id, getattr(module, "rl_step", batch_idx + 1))
        self.refresh()
