"""RL steps are the unit: rl_steps stops a plain-Lightning run after that many rollouts, whatever the
number of optimizer steps each takes, and checkpoint intervals count RL steps."""

import lightning as L
import pytest

from lit_rlhf.callbacks import LastCheckpoint
from tests.conftest import make_datamodule, make_ppo

pytestmark = pytest.mark.integration  # runs a Trainer or an app


def test_rl_steps_stops_after_that_many_rollouts_and_checkpoints_count_rl_steps(tmp_path):
    module = make_ppo(num_ppo_epochs=2, num_mini_batches=2, response_length=8, rl_steps=3)  # 4 updates per step
    checkpoint = LastCheckpoint(dirpath=tmp_path, filename="rl{step}", save_top_k=-1, every_n_train_steps=2,
                                save_last=True)
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        accelerator="cpu", callbacks=[checkpoint])  # no max_steps
    trainer.fit(module, make_datamodule())
    assert module.rl_step == 3 and trainer.global_step == 3 * 4
    # after RL step 2 (Lightning's step 8): `{step}` in a file name is the RL step too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "rlstep=2.ckpt"]
