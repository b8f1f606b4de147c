"""Hydra's "Error merging override" and "No match in the defaults list" for what users type: a value of another
shape than the setting's (model.lora=false), and a group another app has (data=files to train_dpo.py)."""

import pytest

from lit_rlhf.cli.composition import composed, composition_error
from lit_rlhf.cli.configs import register_configs
from tests.config.test_setting_hints import CONF


def line_of(app: str, *overrides: str) -> str:
    register_configs()
    err = composed(CONF, app, list(overrides))
    assert isinstance(err, BaseException), f"{overrides} composed"
    return composition_error(err, CONF, app, list(overrides))


@pytest.mark.parametrize("app, overrides, line", [
    ("train", ["model.lora=false"], "model.lora=false: model.lora is a mapping of settings; set them one by one "
                                    "(model.lora.<key>=<value>) or give it whole, quoted: 'model.lora={<key>: "
                                    "<value>}'; or null to switch it off (null, not false or none): model.lora=null."),
    ("train_dpo", ["model.lora=none"], "model.lora=none: model.lora is a mapping of settings; set them one by one "
                                       "(model.lora.<key>=<value>) or give it whole, quoted: 'model.lora={<key>: "
                                       "<value>}'; or null to switch it off (null, not false or none): "
                                       "model.lora=null."),
    # an untyped mapping: null is not offered (an optimizer of null builds nothing)
    ("train", ["algo.optimizer=[1]"], "algo.optimizer=[1]: algo.optimizer is a mapping of settings; set them one by "
                                      "one (algo.optimizer.<key>=<value>) or give it whole, quoted: "
                                      "'algo.optimizer={<key>: <value>}'."),
    ("train", ["algo.generation_kwargs=5"], "algo.generation_kwargs=5: algo.generation_kwargs is a mapping of "
                                            "settings; set them one by one (algo.generation_kwargs.<key>=<value>) or "
                                            "give it whole, quoted: 'algo.generation_kwargs={<key>: <value>}'."),
    ("train", ["data=files", "data.dataset=[a,b]"], "data.dataset=[a,b] must be one string, not a list."),
    ("train", ["data.dataset={a: 1}"], "data.dataset={a: 1} must be one string, not a mapping."),
])
def test_a_value_of_another_shape_names_the_shape_the_setting_takes(app, overrides, line):
    assert line_of(app, *overrides) == line


@pytest.mark.parametrize("app, overrides, line", [
    ("train_dpo", ["data=files", "data.dataset=p.jsonl"],
     "data=files: `python train_dpo.py` has no data group to choose from (its groups: model, trainer, logger, paths); "
     "data is set key by key, e.g. data.dataset=FILE (`python train_dpo.py --cfg job` prints its keys)."),
    ("train_sft", ["algo=rloo"],
     "algo=rloo: `python train_sft.py` has no algo group to choose from (its groups: model, trainer, logger, paths); "
     "algo is set key by key, e.g. algo.<key>=<value> (`python train_sft.py --cfg job` prints its keys)."),
    ("train_kto", ["reward=vader"], "reward=vader: `python train_kto.py` has no reward group and no reward setting "
                                    "(its groups: model, trainer, logger, paths); see its --help."),
    ("evaluate", ["trainer=cpu"], "trainer=cpu: `python evaluate.py` has no trainer group and no trainer setting (its "
                                  "groups: algo, model, data, reward, gold, rollout, env, score_transforms, "
                                  "task_metrics, paths; it samples on device=auto|cpu|cuda); see its --help."),
    ("serve", ["model=tiny"], "model=tiny: `python -m lit_rlhf.serve` has no model group and no model setting (its "
                              "groups: reward); see its --help."),
])
def test_a_group_the_app_does_not_have_names_the_groups_it_has(app, overrides, line):
    assert line_of(app, *overrides) == line


@pytest.mark.parametrize("app, overrides, line", [
    ("train", ["algo=5"], "algo=5 is not an option of algo (valid options: distill, grpo, ppo, reinforce_pp, rloo)."),
    ("train", ["gold=1.5"], "gold=1.5 is not an option of gold (valid options: arithmetic_correct, none, vader)."),
])
def test_a_number_given_as_a_group_s_option_lists_the_options(app, overrides, line):
    """Hydra reads algo=5 as a number and said only "Config group override must be a string or a list. Got int"."""
    assert line_of(app, *overrides) == line


@pytest.mark.parametrize("override, line", [
    ("algo=", "algo= is empty (a shell variable that is not set?); name one of its options (distill, grpo, ppo, "
              "reinforce_pp, rloo)."),
    ("hydra/sweeper=", "hydra/sweeper= is empty (a shell variable that is not set?); name one of its options."),
])
def test_a_group_typed_empty_lists_its_options(override, line):
    """`algo=$ALGO` with the variable unset said "In 'train': Could not find 'algo/'"; hydra/sweeper= read as the
    option 'sweeper/' of a group 'hydra'."""
    assert line_of("train", override) == line


@pytest.mark.parametrize("n_jobs", ["0", "-2", "abc"])
def test_an_optuna_search_run_by_no_jobs_at_a_time_is_one_line(n_jobs):
    """hydra.sweeper.n_jobs=0 ended in "division by zero (check the command line's overrides)", from the sweeper."""
    overrides = ["hparams_search=rloo_optuna", f"hydra.sweeper.n_jobs={n_jobs}"]
    assert composition_error(ZeroDivisionError("division by zero"), CONF, "train", overrides) == (
        f"hydra.sweeper.n_jobs={n_jobs} must be a whole number >= 1 (the trials run at a time).")
    assert composition_error(ZeroDivisionError("division by zero"), CONF, "train", overrides[:1]) == (
        "division by zero (check the command line's overrides)")
