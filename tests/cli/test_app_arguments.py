"""An app's command line read as Hydra reads it: the flags and their values are no overrides, the flags that choose
the primary config (--config-dir, --config-name, --config-path) reach the one-line errors, --help and the resume
command."""

from pathlib import Path

import pytest

from lit_rlhf.cli.app_arguments import app_arguments, config_flags, search_command_line_config_dir
from lit_rlhf.cli.composition import app_command, composed, composition_error
from lit_rlhf.cli.configs import register_configs
from tests.apps import run_app
from tests.config.test_setting_hints import CONF
from tests.helpers import one_line_error

TRAIN = str(CONF.parent.parent / "train.py")


def test_the_values_of_hydras_flags_are_not_overrides(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    arguments = app_arguments([TRAIN, "--cfg", "job", "-p", "algo", "-cd", "mine", "--config-name=experiment_a", "-m",
                               "algo.kl_coeff=1", "seed=1,2"], CONF, "train")
    assert arguments.overrides == ["algo.kl_coeff=1", "seed=1,2"]
    assert (arguments.config_dir, arguments.config_name) == (CONF, "experiment_a")
    assert arguments.extra_config_dir == tmp_path / "mine"
    assert not arguments.wants_help and app_arguments([TRAIN, "-cd", "mine", "--help"], CONF, "train").wants_help
    assert app_arguments([TRAIN, "-cp", "/elsewhere/conf", "seed=1"], CONF, "train").config_dir == Path(
        "/elsewhere/conf")


def test_the_flags_that_choose_the_config_are_repeated_with_the_directory_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert config_flags(["--cfg", "job", "algo=ppo"]) == ""
    assert config_flags(["-cd", "my conf", "-cn", "mine", "algo=ppo"]) == (
        f"--config-name mine --config-dir '{tmp_path / 'my conf'}'")


@pytest.fixture
def own_config_dir(tmp_path):
    """A user's config directory whose config builds on train.py's, searched as `--config-dir` is."""
    (tmp_path / "mine.yaml").write_text("defaults:\n  - train\n  - _self_\nalgo:\n  kl_coef: 0.11\n")
    search_command_line_config_dir(tmp_path)
    yield tmp_path
    search_command_line_config_dir(None)


def test_an_unknown_key_in_a_run_of_ones_own_config_gets_its_hint_and_the_command_that_lists_the_keys(
        own_config_dir):
    register_configs()
    assert composed(CONF, "mine", []).algo.kl_coef == 0.11
    err = composed(CONF, "mine", ["algo.kl_coeff=1"])
    assert isinstance(err, BaseException)
    command = app_command("train", f"--config-name mine --config-dir {own_config_dir}")
    assert composition_error(err, CONF, "mine", ["algo.kl_coeff=1"], command) == (
        f"algo.kl_coeff is not a setting (did you mean 'kl_coef'?); see `python train.py --config-name mine "
        f"--config-dir {own_config_dir} --cfg job` for every key.")


@pytest.mark.integration
@pytest.mark.parametrize("flags", [["-m", "--cfg", "job", "algo.kl_coef=0.1,0.2"], ["--cfg", "job", "--info"]])
def test_two_of_hydras_modes_in_one_command_are_one_line_about_the_flags(flags, tmp_path):
    """Hydra runs one of --multirun, --cfg and --info per command: the line is about those flags, not overrides."""
    result = run_app("train.py", *flags, cwd=tmp_path)
    assert result.returncode == 2
    assert one_line_error(result) == (
        "error: Only one of --run, --multirun, --cfg, --info and --shell_completion can be specified in one command "
        "(to see a job of a sweep, leave -m out: `python train.py --cfg job <one value of each swept setting>`).")
    assert not (tmp_path / "logs").exists()


@pytest.mark.integration
@pytest.mark.parametrize("flags", [["--cfg", "hydra", "--resolve"], ["--cfg", "hydra", "-p", "hydra.run.dir"]])
def test_hydras_settings_resolved_alone_point_to_the_whole_config(flags, tmp_path):
    """--cfg hydra holds Hydra's settings alone, whose run directories read paths.log_dir and task_name."""
    assert one_line_error(run_app("train.py", *flags, cwd=tmp_path)) == (
        "error: --cfg hydra prints Hydra's settings without the app's, and its run directories read the app's "
        "(paths.log_dir, task_name): print them resolved with `python train.py --cfg all --resolve -p hydra` "
        "(or -p hydra.run.dir).")
    printed = run_app("train.py", "--cfg", "all", "--resolve", "-p", "hydra", cwd=tmp_path)
    assert printed.returncode == 0 and "dir: ./logs/train/runs/" in printed.stdout
