"""curves.png with any logger, the held-out score before training as the first eval/* point, and no flat
val/ratio panel."""

import csv

import lightning as L
import pytest
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from lit_rlhf.callbacks import CurvesPlot
from lit_rlhf.plot import plot_series
from tests.conftest import make_datamodule, make_rloo


def fit(tmp_path, logger):
    L.seed_everything(0)
    curves = CurvesPlot()
    module = make_rloo(response_length=8)
    trainer = L.Trainer(max_steps=2, logger=logger, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", val_check_interval=2, log_every_n_steps=1,
                        default_root_dir=tmp_path, callbacks=[curves], num_sanity_val_steps=0)
    trainer.fit(module, make_datamodule())
    return curves, module


@pytest.mark.integration
def test_curves_are_drawn_without_a_csv_logger_and_start_with_the_heldout_score_before_training(tmp_path):
    curves, module = fit(tmp_path, TensorBoardLogger(tmp_path))
    # the logger's version folder, where Lightning puts its checkpoints: two runs in one root never mix files
    assert curves.path == tmp_path / "lightning_logs" / "version_0" / "curves.png" and curves.path.exists()
    episodes, scores = curves.series["eval/scores"]
    assert episodes == [0.0, 2 * 4 * 4]  # before training, then the validation after step 2
    assert scores[0] == module.heldout_before_training["eval/scores"]


@pytest.mark.integration
def test_the_csv_log_has_the_step_0_heldout_row(tmp_path):
    fit(tmp_path, CSVLogger(tmp_path, name="csv", version=""))
    with open(tmp_path / "csv" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["eval/scores"]]
    assert [r["step"] for r in rows][0] == "0" and len(rows) == 2


def test_a_constant_ratio_gets_no_panel_but_a_moving_one_does(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr("matplotlib.axes.Axes.set_title", lambda ax, title, *a, **k: drawn.append(title))
    plot_series({"val/ratio": ([1, 2], [1.0, 1.0]), "objective/kl": ([1, 2], [0.1, 0.2])}, tmp_path / "a.png")
    assert drawn == ["objective/kl"]
    drawn.clear()
    plot_series({"val/ratio": ([1, 2], [1.0, 1.1])}, tmp_path / "b.png")
    assert drawn == ["val/ratio"]
