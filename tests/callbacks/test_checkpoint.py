import lightning as L
import torch

from lit_rlhf.callbacks import LastCheckpoint
from tests.conftest import make_datamodule, make_rloo


def test_last_checkpoint_holds_the_final_step_when_the_interval_does_not_divide_it(tmp_path):
    L.seed_everything(0)
    checkpoint = LastCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0, every_n_train_steps=2)
    trainer = L.Trainer(max_steps=3, logger=False, enable_progress_bar=False, limit_val_batches=0,
                        accelerator="cpu", callbacks=[checkpoint], default_root_dir=tmp_path)
    trainer.fit(make_rloo(response_length=8), make_datamodule())
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 3 and saved["rlhf_state"]["rl_step"] == 3


def test_checkpoints_are_named_by_the_rl_step_when_it_takes_several_optimizer_steps(tmp_path):
    """PPO with 2 epochs of 2 mini-batches: 4 optimizer steps per RL step; step2.ckpt is RL step 2, not step 2 of
    Lightning's optimizer-step count."""
    from tests.conftest import make_ppo

    L.seed_everything(0)
    checkpoint = LastCheckpoint(dirpath=tmp_path, filename="step{step}", auto_insert_metric_name=False,
                                save_last=True, save_top_k=-1, every_n_train_steps=1)
    trainer = L.Trainer(max_steps=8, logger=False, enable_progress_bar=False, limit_val_batches=0,
                        accelerator="cpu", callbacks=[checkpoint], default_root_dir=tmp_path)
    trainer.fit(make_ppo(response_length=8, num_ppo_epochs=2, num_mini_batches=2), make_datamodule())
    assert sorted(p.name for p in tmp_path.glob("step*.ckpt")) == ["step1.ckpt", "step2.ckpt"]
    assert torch.load(tmp_path / "step2.ckpt", weights_only=True)["rlhf_state"]["rl_step"] == 2
