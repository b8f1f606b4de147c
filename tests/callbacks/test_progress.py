"""The progress bar counts RL steps done / requested (also on resume), not optimizer steps or epochs."""

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_rlhf.callbacks import RLStepsProgressBar
from tests.conftest import make_datamodule, make_ppo


def fit(rl_steps, tmp_path, ckpt_path=None):
    bar = RLStepsProgressBar()
    module = make_ppo(num_ppo_epochs=2, response_length=8)  # 2 optimizer steps per RL step
    trainer = L.Trainer(max_steps=rl_steps * 2, logger=False, enable_model_summary=False, limit_val_batches=0,
                        accelerator="cpu", callbacks=[bar, ModelCheckpoint(dirpath=tmp_path, save_last=True)])
    trainer.fit(module, make_datamodule(), ckpt_path=ckpt_path)
    return bar.progress.tasks[bar.train_progress_bar_id]


def test_the_bar_counts_rl_steps_and_a_resumed_run_continues_the_count(tmp_path):
    task = fit(2, tmp_path)
    assert (task.completed, task.total) == (2, 2) and task.description.strip() == "RL steps"
    resumed = fit(3, tmp_path, ckpt_path=str(tmp_path / "last.ckpt"))
    assert (resumed.completed, resumed.total) == (3, 3)
