"""LastCheckpoint: Lightning's ModelCheckpoint counting RL steps (optimizer steps for a module that has none: the
offline fits), whose last.ckpt always holds the final step."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_rlhf.callbacks.settings import check_count
from lit_rlhf.errors import ConfigError, empty_value_line


class LastCheckpoint(ModelCheckpoint):
    """ModelCheckpoint (Lightning 2.6) writes last.ckpt at train end only if no last.ckpt was written
    before, so a 150-step run saving every 100 steps kept step 100 as "last". This one rewrites it
    whenever the final step has not been saved yet.

    Files are replaced, never versioned: a run resumed from `checkpoints/step1.ckpt` inside its own run
    directory continues that timeline, so its step and last checkpoints replace the old timeline's
    (ModelCheckpoint would write last-v1.ckpt beside a stale last.ckpt)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # ModelCheckpoint compares them with numbers: text was a TypeError traceback (`'<' not supported ...`)
        for name, least, note in (("every_n_train_steps", 0, "(steps between checkpoints; 0: only at the end)"),
                                  ("every_n_epochs", 0, "(or null)"), ("save_top_k", -1, "(-1: keep every one)")):
            if kwargs.get(name) is not None:
                check_count(f"model_checkpoint.{name}", kwargs[name], least, note)
        if kwargs.get("filename") == "":
            raise ConfigError(empty_value_line("callbacks.model_checkpoint.filename=''", "name the checkpoint files "
                                               "(e.g. step{step}), or leave the setting out"))
        kwargs.setdefault("enable_version_counter", False)
        super().__init__(*args, **kwargs)

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, *args) -> None:
        """Every every_n_train_steps RL steps (not optimizer steps), after the RL step: its state is the one to
        resume from. (ModelCheckpoint's manual-optimization branch would warn at every save that it saves the
        state after the optimizer step, which is exactly what an RL checkpoint must hold.)"""
        rl_step = getattr(module, "rl_step", trainer.global_step)
        if (self._every_n_train_steps < 1 or rl_step % self._every_n_train_steps
                or self._should_skip_saving_checkpoint(trainer)):
            return
        candidates = self._monitor_candidates(trainer)
        self._save_topk_checkpoint(trainer, candidates)
        self._save_last_checkpoint(trainer, candidates)

    def _monitor_candidates(self, trainer: L.Trainer) -> dict[str, torch.Tensor]:
        """`{step}` in the file name is the RL step, as every_n_train_steps counts: PPO takes several optimizer steps
        per RL step (num_ppo_epochs x num_mini_batches), and Lightning's step counts those."""
        candidates = super()._monitor_candidates(trainer)
        rl_step = getattr(trainer.lightning_module, "rl_step", None)
        if rl_step is not None:
            candidates["step"] = torch.tensor(rl_step)
        return candidates

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """A resume into a new run directory starts this directory's checkpoint bookkeeping afresh (the old
        directory's files are not this run's to track or delete), without ModelCheckpoint's warning."""
        if state_dict.get("dirpath", self.dirpath) == self.dirpath:
            super().load_state_dict(state_dict)

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self.save_last and self._last_global_step_saved != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        else:
            super().on_train_end(trainer, module)
