import lightning as L
import pytest
import torch

from lit_rlhf.callbacks import LastCheckpoint
from tests.conftest import make_datamodule, make_rloo

pytestmark = pytest.mark.integration  # runs a Trainer or an app


def test_last_checkpoint_holds_the_final_step_when_the_interval_does_not_divide_it(tmp_path):
    L.seed_everything(0)
    checkpoint = LastCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0, every_n_train_steps=2)
    trainer = L.Trainer(max_steps=3, logger=False, enable_progress_bar=False, limit_val_batches=0,
                        accelerator="cpu", callbacks=[checkpoint], default_root_dir=tmp_path)
    trainer.fit(make_rloo(response_length=8), make_datamodule())
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 3 and saved["rlhf_state"]["rl_step"] == 3

