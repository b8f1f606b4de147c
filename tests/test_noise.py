"""Messages a user cannot act on are silenced one by one (lit_rlhf/noise.py)."""

import warnings

import lightning as L
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from lit_rlhf.noise import silence_known_noise


def test_lora_on_gpt2s_conv1d_layers_warns_nothing_a_user_could_act_on():
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("gpt2", vocab_size=100, n_embd=16, n_layer=1,
                                                                  n_head=2))
    silence_known_noise()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", append=True)  # after the silenced messages: every other warning is seen
        get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    assert [str(w.message) for w in caught if "fan_in_fan_out" in str(w.message)] == []


@pytest.mark.integration
def test_lightnings_model_checkpoint_in_a_plain_script_asks_for_no_pre_optimization_copies(tmp_path):
    """Lightning's ModelCheckpoint(every_n_train_steps=N) warns, on a manually optimized module, that it saves the
    state after the optimizer step, with twelve lines of example code: the state an RL checkpoint must hold."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from tests.conftest import make_datamodule, make_rloo

    module = make_rloo(rl_steps=1, response_length=4)
    silence_known_noise()  # as importing lit_rlhf.algos does (pytest restores the warning filters after each test)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, callbacks=[ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", append=True)  # after the silenced messages: every other warning is seen
        trainer.fit(module, make_datamodule())
    assert [str(w.message)[:60] for w in caught if "pre-optimization" in str(w.message)] == []
    assert [p.name for p in tmp_path.glob("*.ckpt")] == ["epoch=0-step=1.ckpt"]


def test_lightnings_all_gather_says_nothing_of_torchs_deprecation(tmp_path):
    """LightningModule.all_gather (under trainer=ddp or fsdp2) calls torch.distributed.nn.functional.all_gather, which
    torch 2.13 deprecates in a warning on every rank."""
    from lightning.fabric.utilities.distributed import _all_gather_ddp_if_available as lightnings_all_gather

    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/group", rank=0, world_size=1)
    try:
        with warnings.catch_warnings(record=True) as unsilenced:
            warnings.simplefilter("always")
            lightnings_all_gather(torch.ones(2))
        deprecated = [str(w.message) for w in unsilenced if "all_gather is deprecated" in str(w.message)]
        if not deprecated:
            pytest.skip("this torch does not deprecate it")
        silence_known_noise()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", append=True)  # after the silenced messages: every other warning is seen
            gathered = lightnings_all_gather(torch.ones(2))
    finally:
        torch.distributed.destroy_process_group()
    assert gathered.tolist() == [[1.0, 1.0]]
    assert [str(w.message) for w in caught if "all_gather is deprecated" in str(w.message)] == []


@pytest.mark.integration
@pytest.mark.parametrize("app_output", [True, False])
def test_the_optuna_sweeper_s_import_prints_no_plugin_lines_in_an_app(app_output):
    """`import optuna` imports alembic, which logs each plugin it sets up at INFO; Hydra's logging (root at INFO, a
    console handler) printed the seven lines before every hparams_search=rloo_optuna search."""
    import subprocess
    import sys

    pytest.importorskip("optuna")
    script = ("import logging; logging.basicConfig(level=logging.INFO, format='%(message)s'); "
              "from lit_rlhf.cli.errors import set_up_app_output; "
              f"{'set_up_app_output()' if app_output else 'pass'}; import optuna")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert ("setup plugin alembic" in out.stdout + out.stderr) is not app_output  # printed without the app's set-up
