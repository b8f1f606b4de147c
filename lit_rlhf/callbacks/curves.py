"""CurvesPlot: at the end of fit, draws the main curves into <run dir>/curves.png, whatever the loggers.

With a CSV logger the curves come from its metrics.csv (a resumed run's included); otherwise, for an RL module, from
the metrics this callback collects while the run goes (each RL step's, and each validation's). A fit on a file
(train_sft.py, train_dpo.py, ...) is drawn from its CSV log, by optimizer step."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities import rank_zero_info

from lit_rlhf.callbacks.run_folder import run_folder
from lit_rlhf.plot import CURVES, plot_curves, plot_series


class CurvesPlot(L.Callback):
    def __init__(self, filename: str = "curves.png", dirpath: str | None = None):
        self.filename, self.dirpath = filename, dirpath
        self.path: Path | None = None
        self.series: dict[str, tuple[list[float], list[float]]] = {}

    def record(self, episode: float, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            if name in CURVES:
                xs, ys = self.series.setdefault(name, ([], []))
                xs.append(float(episode))
                ys.append(float(value))

    def on_train_batch_end(self, trainer: L.Trainer, module, *args) -> None:
        if not hasattr(module, "last_stats"):  # a fit on a file (DPO, SFT, ...): drawn from its CSV log alone
            return
        if not self.series and getattr(module, "heldout_before_training", None):
            self.record(0, module.heldout_before_training)
        self.record(module.episode, module.last_stats)

    def on_validation_end(self, trainer: L.Trainer, module) -> None:
        if not trainer.sanity_checking and hasattr(module, "episode"):
            metrics = trainer.callback_metrics
            self.record(module.episode, {k: float(v) for k, v in metrics.items() if k.startswith("eval/")})

    def on_fit_end(self, trainer: L.Trainer, module) -> None:
        if not trainer.is_global_zero:
            return
        out = run_folder(trainer, self.dirpath) / self.filename
        csv_loggers = [lg for lg in trainer.loggers if isinstance(lg, CSVLogger)]
        if csv_loggers:
            csv_loggers[0].save()
            metrics = Path(csv_loggers[0].log_dir) / "metrics.csv"
            self.path = plot_curves(metrics, out) if metrics.exists() else None
        elif self.series:
            self.path = plot_series(self.series, out)
        if self.path is not None:
            rank_zero_info(f"Curves: {self.path}")
