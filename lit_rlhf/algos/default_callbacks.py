"""What an RLHF module puts in place of Lightning's default display callbacks under a plain `lightning.Trainer`.

Lightning's default progress bar counts batches of an endless prompt stream ("Epoch 0/999 20/--", no ETA) and its
default model summary prints FLOPs it never counted; the module offers RLStepsProgressBar and ModelSummaryTable in
their place (LightningModule.configure_callbacks). Only Lightning's own classes are replaced, by exact type, and with
the settings they were given (a RichProgressBar passed with a theme keeps it, and counts RL steps); a bar or summary of
another class, or one switched off, stays as it is.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import RichModelSummary, RichProgressBar

from lit_rlhf.display import ModelSummaryTable, RLStepsProgressBar


def display_callbacks(trainer: L.Trainer | None) -> list[L.Callback]:
    if trainer is None:
        return []
    replacements = []
    bar = trainer.progress_bar_callback
    if type(bar) is RichProgressBar:
        replacements.append(RLStepsProgressBar(refresh_rate=bar.refresh_rate, leave=bar._leave, theme=bar.theme,
                                               console_kwargs=bar._console_kwargs))
    summary = next((c for c in trainer.callbacks if type(c) is RichModelSummary), None)
    if summary is not None:
        replacements.append(ModelSummaryTable(max_depth=summary._max_depth, **summary._summarize_kwargs))
    return replacements
