from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from peft import PeftModel
from transformers import AutoModelForCausalLM

from lit_rlhf.export import export_policy, load_from_checkpoint
from tests.apps import run_app
from tests.conftest import make_datamodule, make_ppo

pytestmark = pytest.mark.integration  # runs a Trainer or an app


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A PPO run with a critic adapter (three adapters on one base), checkpointed after 2 RL steps."""
    tmp = tmp_path_factory.mktemp("run")
    L.seed_everything(0)
    module = make_ppo(critic="adapter", num_ppo_epochs=1)
    trainer = L.Trainer(max_steps=2, logger=False, enable_progress_bar=False, limit_val_batches=0,
                        accelerator="cpu", callbacks=[ModelCheckpoint(dirpath=tmp, filename="last")],
                        default_root_dir=tmp)
    trainer.fit(module, make_datamodule())
    dm = make_datamodule()
    dm.setup()
    return module, tmp / "last.ckpt", next(iter(dm.val_dataloader()))


def greedy(model, batch):
    return model.generate(**batch, do_sample=False, max_new_tokens=12, pad_token_id=1)


def test_merged_export_loads_in_transformers_and_generates_the_trained_policys_tokens(trained, tmp_path):
    module, ckpt, batch = trained
    restored = load_from_checkpoint(ckpt)
    out = export_policy(restored, tmp_path / "hf")
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    exported = AutoModelForCausalLM.from_pretrained(out).eval()
    module.policy.eval()
    with torch.no_grad():
        assert torch.equal(greedy(exported, batch), greedy(module.policy, batch))
        torch.testing.assert_close(exported(**batch).logits, module.policy(**batch).logits, atol=1e-4, rtol=1e-4)
    base = AutoModelForCausalLM.from_pretrained(module.hparams.model["name_or_path"]).eval()
    with torch.no_grad():
        assert not torch.allclose(exported(**batch).logits, base(**batch).logits)  # training is in the export


def test_an_export_carries_a_model_card_with_its_origin_settings_figures_and_how_to_load_it(trained, tmp_path):
    module, ckpt, _ = trained
    out = export_policy(load_from_checkpoint(ckpt), tmp_path / "hf", metrics={"eval/score": 0.25, "loss": 1.0})
    card = (out / "README.md").read_text()
    assert "PPOModule for 2 RL steps" in card and f"from `{module.hparams.model['name_or_path']}`" in card
    assert '"num_ppo_epochs": 1' in card and "lit_rlhf 0.1.0" in card
    assert "| eval/score | 0.25 |" in card and "| loss |" not in card  # end-of-run figures only
    assert f'AutoModelForCausalLM.from_pretrained("{out}")' in card
    adapter = export_policy(load_from_checkpoint(ckpt), tmp_path / "adapter", adapter_only=True)
    assert "AutoPeftModelForCausalLM" in (adapter / "README.md").read_text()


def test_adapter_only_export_round_trips_through_peft(trained, tmp_path):
    module, ckpt, batch = trained
    out = export_policy(load_from_checkpoint(ckpt), tmp_path / "adapter", adapter_only=True)
    assert (out / "adapter_model.safetensors").exists() and not (out / "model.safetensors").exists()
    base = AutoModelForCausalLM.from_pretrained(module.hparams.model["name_or_path"])
    reloaded = PeftModel.from_pretrained(base, out).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, module.policy(**batch).logits, atol=1e-5, rtol=1e-5)


def test_export_command_and_its_errors(trained, tmp_path):
    _, ckpt, _ = trained
    ok = run_app("lit_rlhf.export", str(ckpt), str(tmp_path / "cli"), cwd=tmp_path, module=True)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert (tmp_path / "cli" / "config.json").exists()
    bad = run_app("lit_rlhf.export", str(tmp_path / "nope.ckpt"), str(tmp_path / "x"), cwd=tmp_path, module=True)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error: ckpt_path=")


def export_cli(*args):
    return run_app("lit_rlhf.export", *map(str, args), cwd=Path.cwd(), module=True)


def test_export_never_overwrites_and_refuses_a_corrupted_checkpoint(trained, tmp_path):
    _, ckpt, _ = trained
    assert export_cli(ckpt, tmp_path / "out").returncode == 0
    config = (tmp_path / "out" / "config.json").read_text()
    (tmp_path / "out" / "config.json").write_text(config.replace("{", '{"mine": 1,', 1))
    again = export_cli(ckpt, tmp_path / "out")
    assert again.returncode == 2 and "is not empty" in again.stderr
    assert '"mine": 1' in (tmp_path / "out" / "config.json").read_text()  # untouched
    (tmp_path / "a_file").write_text("x")
    assert "is a file" in export_cli(ckpt, tmp_path / "a_file").stderr

    checkpoint = torch.load(ckpt, weights_only=True)
    name = next(iter(checkpoint["state_dict"]))
    checkpoint["state_dict"][name].view(-1)[0] = -6.9e35  # one weight corrupted, the digest left as written
    torch.save(checkpoint, tmp_path / "corrupted.ckpt")
    corrupted = export_cli(tmp_path / "corrupted.ckpt", tmp_path / "out2")
    assert corrupted.returncode == 2 and "corrupted" in corrupted.stderr and "Traceback" not in corrupted.stderr
    assert not (tmp_path / "out2").exists()


def test_exported_files_get_the_mode_the_users_umask_gives_new_files(trained, tmp_path):
    import os

    _, ckpt, _ = trained
    previous = os.umask(0o022)
    try:
        out = export_policy(load_from_checkpoint(ckpt), tmp_path / "hf")
    finally:
        os.umask(previous)
    modes = {path.name: path.stat().st_mode & 0o777 for path in out.iterdir()}
    assert modes["model.safetensors"] == 0o644 and set(modes.values()) == {0o644}, modes


def test_exporting_a_module_before_its_model_is_built_says_when_to_export(tmp_path):
    """From Python, export_policy(module, ...) before trainer.fit: the model is built in configure_model, and the
    module holds None until then."""
    from lit_rlhf.errors import ConfigError
    from tests.conftest import make_rloo

    with pytest.raises(ConfigError, match=r"^the module has no model to export yet: .* export after trainer\.fit"):
        export_policy(make_rloo(), tmp_path / "policy")
    assert not (tmp_path / "policy").exists()
