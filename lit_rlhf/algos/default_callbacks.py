"""What an RLHF module puts in place of Lightning's default display callbacks under a plain `lightning.Trainer`.

Lightning's default progress bar counts batches of an endless prompt stream ("Epoch 0/999 20/--", no ETA) and its
default model summary prints FLOPs it never counted; the module offers RLStepsProgressBar and ModelSummaryTable in
their place (LightningModule.configure_callbacks). Only Lightning's own defaults are replaced, by exact type: a bar
or summary the user chose, or switched off, stays as it is.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import RichModelSummary, RichProgressBar

from lit_rlhf.display import ModelSummaryTable, RLStepsProgressBar


def display_callbacks(trainer: L.Trainer | None) -> list[L.Callback]:
    if trainer is None:
        return []
    replacements = []
    if type(trainer.progress_bar_callback) is RichProgressBar:
        replacements.append(RLStepsProgressBar())
    summary = next((c for c in trainer.callbacks if type(c) is RichModelSummary), None)
    if summary is not None:
        replacements.append(ModelSummaryTable(max_depth=summary._max_depth))
    return replacements
