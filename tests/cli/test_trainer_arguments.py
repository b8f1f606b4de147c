"""The Trainer arguments the command line's errors know: Lightning's own list, and the hints for the ones the trainer
group does not set."""

import inspect

import lightning as L
import pytest
import yaml
from omegaconf import OmegaConf

from lit_rlhf.cli.trainer_arguments import (
    TRAINER_ARGUMENTS,
    manual_optimization_line,
    trainer_argument_hint,
    trainer_interval_line,
    trainer_limit_line,
    trainer_refusal_line,
)
from tests.helpers import ROOT


def test_the_list_holds_every_argument_of_lightning_s_trainer_and_every_key_the_trainer_group_sets():
    assert set(inspect.signature(L.Trainer.__init__).parameters) - {"self"} <= set(TRAINER_ARGUMENTS)
    for path in (ROOT / "lit_rlhf" / "conf" / "trainer").glob("*.yaml"):
        keys = set(yaml.safe_load(path.read_text()) or {}) - {"_target_", "defaults"}
        assert keys <= set(TRAINER_ARGUMENTS), (path.name, keys - set(TRAINER_ARGUMENTS))


def test_a_trainer_argument_the_group_lacks_is_pointed_at_what_sets_it():
    rl = OmegaConf.create({"algo": {"max_grad_norm": 1.0, "gradient_accumulation_steps": 1}, "trainer": {}})
    pairs = OmegaConf.create({"algo": {"beta": 0.1}, "trainer": {}})  # train_dpo.py: automatic optimization
    assert "set algo.max_grad_norm instead" in trainer_argument_hint("gradient_clip_val", rl)
    assert "set algo.gradient_accumulation_steps instead" in trainer_argument_hint("accumulate_grad_batches", rl)
    assert "+trainer.gradient_clip_val=..." in trainer_argument_hint("gradient_clip_val", pairs)
    assert "+trainer.deterministic=..." in trainer_argument_hint("deterministic", rl)
    assert "logger=csv" in trainer_argument_hint("logger", rl)
    assert trainer_argument_hint("max_stepz", rl) is None  # not Lightning's: the usual nearest-key hint


def test_lightning_s_refusal_under_manual_optimization_names_the_module_setting():
    line = manual_optimization_line("Automatic gradient clipping is not supported for manual optimization. Remove "
                                    "`Trainer(gradient_clip_val=0.5)` or switch to automatic optimization.")
    assert line.startswith("trainer.gradient_clip_val=0.5: the RL modules optimize by hand")
    assert line.endswith("set algo.max_grad_norm instead and drop trainer.gradient_clip_val.")
    assert manual_optimization_line("Some other misconfiguration.") is None


def test_checkpointing_switched_off_in_the_trainer_names_the_callbacks_that_write_checkpoints():
    """Lightning's own line ("found `ModelCheckpoint` in callbacks list") named no setting the user had typed: the
    interrupt checkpoint is a Checkpoint too."""
    line = trainer_refusal_line("Trainer was configured with `enable_checkpointing=False` but found `ModelCheckpoint` "
                                "in callbacks list.")
    assert line.startswith("trainer.enable_checkpointing=false: the checkpoints are written by callbacks")
    assert "set callbacks.model_checkpoint=null callbacks.checkpoint_on_interrupt=null" in line
    assert trainer_refusal_line("Automatic gradient clipping is not supported for manual optimization. Remove "
                                "`Trainer(gradient_clip_val=0.5)` or switch to automatic optimization.").startswith(
        "trainer.gradient_clip_val=0.5:")
    assert trainer_refusal_line("Some other misconfiguration.") is None


@pytest.mark.parametrize("setting, value, expected", [
    ("val_check_interval", 0, "trainer.val_check_interval=0 must be > 0 (RL steps between held-out evaluations)"),
    ("val_check_interval", -0.5, "trainer.val_check_interval=-0.5 must be > 0"),
    ("check_val_every_n_epoch", 0, "trainer.check_val_every_n_epoch=0 must be a whole number >= 1"),
    ("check_val_every_n_epoch", -1, "trainer.check_val_every_n_epoch=-1 must be a whole number >= 1"),
    ("check_val_every_n_epoch", 1.5, "trainer.check_val_every_n_epoch=1.5 must be a whole number >= 1"),
    ("log_every_n_steps", -1, "trainer.log_every_n_steps=-1 must be a whole number >= 0"),
    ("log_every_n_steps", 0.5, "trainer.log_every_n_steps=0.5 must be a whole number >= 0"),
    ("log_every_n_steps", True, "trainer.log_every_n_steps=True must be a whole number >= 0"),
])
def test_an_interval_lightning_divides_or_counts_by_is_one_line(setting, value, expected):
    """Unchecked, check_val_every_n_epoch=0 (in the pair apps val_check_interval=0 too) stops the fit mid-run on
    Lightning's ZeroDivisionError, and a negative log_every_n_steps logs at every step."""
    assert trainer_interval_line(OmegaConf.create({setting: value}), "RL steps").startswith(expected)


@pytest.mark.parametrize("trainer", [
    {"val_check_interval": 50, "check_val_every_n_epoch": None, "log_every_n_steps": 1},
    {"val_check_interval": 0.25, "check_val_every_n_epoch": 2, "log_every_n_steps": 0},  # 0: no step's statistics
    {"val_check_interval": "00:00:10:00"},  # Lightning's time-based interval
    {},
])
def test_the_intervals_lightning_accepts_pass(trainer):
    assert trainer_interval_line(OmegaConf.create(trainer), "RL steps") is None


@pytest.mark.parametrize("setting, value, expected", [
    ("max_epochs", "abc", "trainer.max_epochs='abc' must be a whole number >= -1 (-1 or null: no limit)."),
    ("max_epochs", -2, "trainer.max_epochs=-2 must be a whole number >= -1"),
    ("max_steps", "abc", "trainer.max_steps='abc' must be a whole number >= -1 (-1: no limit)."),
    ("max_steps", None, "trainer.max_steps=None must be a whole number >= -1"),
    ("max_steps", 1.5, "trainer.max_steps=1.5 must be a whole number >= -1"),
    ("min_steps", -1, "trainer.min_steps=-1 must be a whole number >= 0 (null: none)."),
    ("min_epochs", "x", "trainer.min_epochs='x' must be a whole number >= 0"),
    ("limit_val_batches", "abc", "trainer.limit_val_batches='abc' must be a whole number of batches (>= 0) or a "
                                 "fraction of them from 0.0 to 1.0."),
    ("limit_train_batches", 1.5, "trainer.limit_train_batches=1.5 must be a whole number of batches"),
    ("overfit_batches", -1, "trainer.overfit_batches=-1 must be a whole number of batches"),
    ("devices", "abc", "trainer.devices='abc' must be a number of devices (e.g. 1; -1: all of them), a list of "
                       "device indices ([0,1]) or auto."),
    ("devices", "0;1", "trainer.devices='0;1' must be a number of devices"),
])
def test_a_trainer_count_of_the_wrong_kind_is_one_line(setting, value, expected):
    """Unchecked, max_epochs=abc failed an assert inside Lightning's Trainer, max_steps=abc and limit_val_batches=abc
    ended on "'<' not supported between instances of 'str' and 'int'", and devices=abc was refused without its
    value."""
    assert trainer_limit_line(OmegaConf.create({setting: value})).startswith(expected)


@pytest.mark.parametrize("trainer", [
    {"max_steps": -1, "max_epochs": -1, "devices": 1, "num_nodes": 1},
    {"max_steps": 10, "max_epochs": None, "min_steps": None, "min_epochs": 0},
    {"limit_val_batches": 0, "limit_train_batches": 0.5, "overfit_batches": 0.0, "limit_test_batches": 1.0},
    {"devices": "auto"}, {"devices": -1}, {"devices": "-1"}, {"devices": "2"}, {"devices": "0,1"}, {"devices": [0, 1]},
    {},
])
def test_the_counts_lightning_accepts_pass(trainer):
    assert trainer_limit_line(OmegaConf.create(trainer)) is None


@pytest.mark.parametrize("app, counted_in", [("train", "(RL steps between"),
                                             ("train_sft", "(training batches, or a fraction of an epoch, between")])
def test_each_app_says_what_its_validation_interval_counts(app, counted_in, tmp_path):
    from hydra import compose, initialize_config_dir

    from lit_rlhf.cli.checks import check_fitting_on_a_file, check_run_settings
    from lit_rlhf.cli.resolvers import register_resolvers
    from lit_rlhf.errors import ConfigError

    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose(app, overrides=[f"paths.output_dir={tmp_path}", "trainer.val_check_interval=0"])
    with pytest.raises(ConfigError) as refused:
        (check_run_settings if app == "train" else check_fitting_on_a_file)(cfg)
    assert f"trainer.val_check_interval=0 must be > 0 {counted_in} held-out evaluations)" in str(refused.value)


@pytest.mark.parametrize("name, value, expected", [
    ("num_nodes", 0, "`num_nodes` must be a positive integer, but got 0."),
    ("precision", "bf17", "Precision 'bf17' is invalid. Allowed precision values:"),
    ("devices", -2, "`devices` selected with `CPUAccelerator` should be an int > 0."),
])
def test_a_value_lightning_s_trainer_refuses_with_a_value_error_is_one_line(name, value, expected):
    """Lightning refuses these with a ValueError or TypeError, not its MisconfigurationException, which Hydra wraps
    in a traceback of its own."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    from lit_rlhf.cli.errors import user_error

    with pytest.raises(InstantiationException) as refused:
        instantiate({"_target_": "lightning.Trainer", "accelerator": "cpu", "logger": False, name: value})
    line = user_error(refused.value)
    assert line is not None and line.startswith(expected) and line.endswith("(check the trainer group's settings)")


def test_another_error_in_a_call_is_not_taken_for_the_trainer_s():
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    from lit_rlhf.cli.errors import trainer_value_line

    with pytest.raises(InstantiationException) as failed:
        instantiate({"_target_": "builtins.int", "_args_": ["abc"]})
    assert trainer_value_line(failed.value) is None


@pytest.mark.parametrize("devices, accelerator, shown", [([0, 1], "cpu", "[0, 1]"), ("0,1", "cpu", "0,1"),
                                                        ([0], "auto", "[0]")])
def test_gpu_indices_on_a_cpu_run_are_one_line_naming_the_value(devices, accelerator, shown, monkeypatch):
    """trainer.devices='0,1' on a CPU quoted Lightning's "`devices` selected with `CPUAccelerator` should be an int >
    0", which names neither the setting's key nor the value typed."""
    from omegaconf import OmegaConf

    import lit_rlhf.cli.hardware_checks as checks
    from lit_rlhf.errors import ConfigError

    monkeypatch.setattr(checks, "cuda_available", lambda: False)
    cfg = OmegaConf.create({"trainer": {"accelerator": accelerator, "devices": devices}})
    with pytest.raises(ConfigError) as refused:
        checks.check_accelerator(cfg)
    why = "trainer.accelerator=cpu" if accelerator == "cpu" else "this machine has no CUDA GPU"
    assert str(refused.value) == (f"trainer.devices={shown} picks GPUs by index, and this run is on the CPU ({why}); "
                                  f"give a number of processes instead, e.g. trainer.devices=2.")
    for count in (2, "2", "auto", -1):  # counts pass
        checks.check_accelerator(OmegaConf.create({"trainer": {"accelerator": accelerator, "devices": count}}))
    monkeypatch.setattr(checks, "cuda_available", lambda: True)  # indices pick GPUs where there are some
    checks.check_accelerator(OmegaConf.create({"trainer": {"accelerator": "auto", "devices": devices}}))


@pytest.mark.parametrize("app", ["train", "train_sft"])
def test_every_app_checks_gpu_indices_before_the_trainer_is_built(app, tmp_path, monkeypatch):
    from hydra import compose, initialize_config_dir

    import lit_rlhf.cli.checks as checks
    import lit_rlhf.cli.hardware_checks as hardware_checks
    from lit_rlhf.cli.resolvers import register_resolvers
    from lit_rlhf.errors import ConfigError

    monkeypatch.setattr(hardware_checks, "cuda_available", lambda: False)
    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose(app, overrides=[f"paths.output_dir={tmp_path}", "trainer.devices=[0,1]"])
    with pytest.raises(ConfigError, match=r"^trainer.devices=\[0, 1\] picks GPUs by index"):
        (checks.check_run_settings if app == "train" else checks.check_fitting_on_a_file)(cfg)
