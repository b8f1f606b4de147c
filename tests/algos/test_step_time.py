"""time/step_s is an RL step's own time: a validation between two steps is logged as time/validation_s and left out
of the next step's time."""

import csv
import time

import lightning as L
import pytest
from lightning.pytorch.loggers import CSVLogger

from tests.conftest import make_datamodule, make_rloo

pytestmark = pytest.mark.integration  # runs a Trainer or an app

VALIDATION_S = 1.5  # far longer than a tiny step


def test_validations_are_timed_apart_from_the_rl_steps(tmp_path):
    module = make_rloo(response_length=4)
    sample_heldout = module.sample_heldout

    def slow_sample_heldout(*args, **kwargs):
        time.sleep(VALIDATION_S)
        return sample_heldout(*args, **kwargs)

    module.sample_heldout = slow_sample_heldout
    trainer = L.Trainer(max_steps=2, val_check_interval=1, limit_val_batches=1, log_every_n_steps=1,
                        logger=CSVLogger(tmp_path, name=""), enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu")
    trainer.fit(module, make_datamodule())
    rows = list(csv.DictReader(open(tmp_path / "version_0" / "metrics.csv")))
    validations = [float(r["time/validation_s"]) for r in rows if r.get("time/validation_s")]
    steps = {int(r["step"]): float(r["time/step_s"]) for r in rows if r.get("time/step_s")}
    # the starting policy's validation (logged at step 0) and one after each of the 2 steps
    assert len(validations) == 3 and all(s >= VALIDATION_S for s in validations), validations
    assert len(steps) == 2 and all(0 < s < VALIDATION_S for s in steps.values()), steps
