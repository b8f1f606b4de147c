"""CurvesPlot: at the end of fit, draws the main curves from the CSV log into <run dir>/curves.png."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import CSVLogger

from lit_rlhf.plot import plot_curves


class CurvesPlot(L.Callback):
    def __init__(self, filename: str = "curves.png", dirpath: str | None = None):
        self.filename, self.dirpath = filename, dirpath
        self.path: Path | None = None

    def on_fit_end(self, trainer: L.Trainer, module) -> None:
        csv_loggers = [lg for lg in trainer.loggers if isinstance(lg, CSVLogger)]
        if not trainer.is_global_zero or not csv_loggers:
            return
        csv_loggers[0].save()
        metrics = Path(csv_loggers[0].log_dir) / "metrics.csv"
        if metrics.exists():
            self.path = plot_curves(metrics, Path(self.dirpath or trainer.default_root_dir) / self.filename)
            print(f"Curves: {self.path}")
