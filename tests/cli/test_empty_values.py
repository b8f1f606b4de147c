"""A path typed empty (`ckpt_path=$CKPT` with the variable unset) is refused in one line naming its key: read as a
path it was the working directory (a model saved over the files there, "a directory without meta.pt"), read as
"not set" a fresh run or the untrained model's evaluation. And save_dir, outside the run directory, must be new or
empty: the fit wrote the trained model over another model's files."""

import re

import pytest
from omegaconf import OmegaConf

from lit_rlhf.checkpoints.paths import check_checkpoint_path
from lit_rlhf.cli.evaluation_checks import check_evaluation
from lit_rlhf.cli.output_folders import check_save_dir
from lit_rlhf.config.data import check_dataset_file
from lit_rlhf.config.locations import check_model_location
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.export import check_export_dir

EMPTY = "is empty (a shell variable that is not set?)"


@pytest.mark.parametrize("check, key", [
    (check_checkpoint_path, "ckpt_path"),
    (lambda value: check_model_location("model.name_or_path", value), "model.name_or_path"),
    (lambda value: check_model_location("reward.name_or_path", value), "reward.name_or_path"),
    (check_dataset_file, "data.dataset"),
    (lambda value: check_export_dir(value, "export_dir"), "export_dir"),
])
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_path_is_refused_with_its_key(check, key, value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a working directory that holds files, as a user's does
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=f"^{re.escape(f'{key}={value!r} {EMPTY}')}"):
        check(value)


def test_an_empty_optimized_metric_is_refused_instead_of_read_as_no_objective():
    """Read as null, the run returned no objective to its sweeper (an Optuna trial then failed after training)."""
    from lit_rlhf.cli.checks import check_objective_named

    check_objective_named(OmegaConf.create({"optimized_metric": None}))  # null: no objective, as documented
    with pytest.raises(ConfigError, match=f"^{re.escape(f'optimized_metric={chr(39) * 2} {EMPTY}; name a metric')}"):
        check_objective_named(OmegaConf.create({"optimized_metric": ""}))


def evaluation_settings(**typed):
    return OmegaConf.create({"seed": 0, "reward": {"_target_": "lit_rlhf.rewards.VaderSentiment"}, "gold": None,
                             "rollout": None, "judge": None, "samples_per_prompt": 4, "num_bootstraps": 40,
                             "trust_remote_code": False, "trust_checkpoint_io": False, "confidence": 0.95,
                             "ckpt_path": None, "policy_path": None, **typed})


@pytest.mark.parametrize("key", ["ckpt_path", "policy_path"])
def test_evaluate_refuses_an_empty_checkpoint_or_policy_instead_of_evaluating_the_untrained_model(key):
    check_evaluation(evaluation_settings())  # neither given: the untrained model, as documented
    with pytest.raises(ConfigError, match=f"^{key}='' is empty"):
        check_evaluation(evaluation_settings(**{key: ""}))


def fit_settings(run_dir, save_dir):
    return OmegaConf.create({"paths": {"output_dir": str(run_dir)}, "save_dir": save_dir})


def test_save_dir_outside_the_run_directory_must_be_new_or_empty(tmp_path):
    run_dir, theirs = tmp_path / "run", tmp_path / "their_model"
    run_dir.mkdir()
    theirs.mkdir()
    check_save_dir(fit_settings(run_dir, str(theirs)))  # empty
    check_save_dir(fit_settings(run_dir, str(tmp_path / "new")))  # new
    (theirs / "model.safetensors").write_text("weights")
    with pytest.raises(ConfigError, match=r"^save_dir='.*their_model' holds files already, which the trained model "
                                          r"would overwrite"):
        check_save_dir(fit_settings(run_dir, str(theirs)))
    (run_dir / "policy").mkdir()  # the run's own, saved before a resume: written again
    (run_dir / "policy" / "model.safetensors").write_text("weights")
    check_save_dir(fit_settings(run_dir, str(run_dir / "policy")))
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ConfigError, match="^save_dir='.*a_file' is a file"):
        check_save_dir(fit_settings(run_dir, str(tmp_path / "a_file")))
    with pytest.raises(ConfigError, match=f"^save_dir='' {re.escape(EMPTY)}"):
        check_save_dir(fit_settings(run_dir, ""))


def test_a_sweep_s_later_trial_is_checked_too_and_leaves_the_earlier_trial_s_model(tmp_path):
    """A sweep's trials skip the checks before the imports (each trial is recorded, the sweep goes on): with
    save_dir=mine, trial 1 wrote its model over trial 0's."""
    from hydra import compose, initialize_config_dir

    from lit_rlhf.cli.configs import register_configs
    from lit_rlhf.cli.preferences import set_up_fit_on_pairs
    from lit_rlhf.cli.resolvers import register_resolvers
    from tests.config.test_setting_hints import CONF

    register_resolvers()
    register_configs()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "model.safetensors").write_text("trial 0's weights")
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("train_dpo", overrides=[f"paths.output_dir={tmp_path / 'run'}", f"save_dir={tmp_path / 'mine'}"])
    with pytest.raises(ConfigError, match="holds files already, which the trained model would overwrite"):
        set_up_fit_on_pairs(cfg)
    assert (tmp_path / "mine" / "model.safetensors").read_text() == "trial 0's weights"


@pytest.mark.parametrize("override, line", [
    ("paths.log_dir=", "paths.log_dir='' is empty (a shell variable that is not set?); give a directory, or leave "
                       "paths.log_dir out."),
    ("paths.root_dir=''", "paths.root_dir='' is empty"),
    ("hydra.sweep.dir= ", "hydra.sweep.dir='' is empty"),
    ("task_name=", "task_name='' is empty (a shell variable that is not set?); give the runs' folder a name "
                   "(logs/<task_name>/runs/), or leave task_name out."),
    ("paths.output_dir=mine", "paths.output_dir=mine: paths.output_dir follows hydra.run.dir; set hydra.run.dir=<a new "
                              "or empty directory> instead (or the run's own directory, with ckpt_path=last, to "
                              "resume it)."),
])
def test_a_run_location_typed_empty_or_paths_output_dir_is_refused(override, line):
    """paths.log_dir= put the run at the filesystem's root (/train/runs/...), task_name= in logs/runs/;
    paths.output_dir=<a run's directory> wrote into it, where hydra.run.dir=<it> is refused."""
    from lit_rlhf.cli.run_dirs import run_location_line

    assert run_location_line(["steps=2", override]).startswith(line)
    assert run_location_line(["steps=2", "paths.log_dir=logs", "hydra.run.dir=runs/a"]) is None


@pytest.mark.integration
def test_hydra_run_dir_typed_empty_writes_nothing_into_the_working_directory(tmp_path):
    """Hydra creates the run directory before the app's checks: hydra.run.dir= ran the run in the working directory."""
    from tests.apps import run_app

    result = run_app("train.py", "hydra.run.dir=", cwd=tmp_path)
    assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (2, (
        "error: hydra.run.dir='' is empty (a shell variable that is not set?); give a directory, or leave "
        "hydra.run.dir out."))
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("group, name, key", [("callbacks", "model_checkpoint", "dirpath"),
                                              ("callbacks", "generation_samples", "dirpath"),
                                              ("logger", "csv", "save_dir")])
def test_an_output_folder_typed_empty_is_refused(group, name, key):
    """callbacks.model_checkpoint.dirpath= wrote last.ckpt (samples.jsonl, curves.png, the CSV log) into the working
    directory."""
    from lit_rlhf.cli.checks import check_output_folders

    settings = {group: {name: {"_target_": "x.Y", key: "${paths.output_dir}"}}}
    check_output_folders(OmegaConf.create(settings))  # the default, left unresolved
    settings[group][name][key] = ""
    with pytest.raises(ConfigError) as refused:
        check_output_folders(OmegaConf.create(settings))
    assert str(refused.value) == (f"{group}.{name}.{key}='' {EMPTY}; give a directory, or leave {group}.{name}.{key} "
                                  f"out (in the run directory).")
