"""Hydra's override forms misused (a + on what is there, several values without -m, an override that does not parse,
a ~ on what the run reads, a ${...} that names nothing): one line each that says which form was meant."""

import sys

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError, InterpolationKeyError, InterpolationResolutionError

from lit_rlhf.cli.override_forms import removed_or_unresolved_line
from tests.config.test_setting_hints import CONF, composition_line


@pytest.mark.parametrize("overrides, line", [
    (["+seed=1"], "seed is already in the config: set it without the + (seed=1), or with ++ to set it whether or not "
                  "it is there."),
    (["+data.batch_size=4"], "data.batch_size is already in the config: set it without the + (data.batch_size=4), "
                             "or with ++ to set it whether or not it is there."),
    (["+algo=ppo"], "algo is already chosen by the defaults: choose algo=ppo without the +."),
    (["algo.kl_coeff=1", "+algo=ppo"], "algo is already chosen by the defaults: choose algo=ppo without the +."),
    (["+trainer=cpu"], "trainer is already chosen by the defaults: choose trainer=cpu without the +."),
    (["algo=rloo,ppo"], "algo=rloo,ppo names several options of the group algo: add -m to run each (python train.py "
                        "-m algo=rloo,ppo)."),
    (["algo=[rloo,grpo]"], "algo=[rloo,grpo]: a list merges the options of the group algo into one config; choose one "
                           "(algo=rloo), or run each: python train.py -m algo=rloo,grpo."),
    (["reward=[vader,vadr]"], "reward=vadr is not an option of reward (did you mean 'vader'?)."),  # a group of lists
    (["seed=0,1"], "seed=0,1 gives several values: add -m to sweep over them (python train.py -m seed=0,1), or write "
                   "one list, seed=[0,1], or one string, quoted: seed='0,1'."),
    (["seed=1", "algo.kl_coef"], "algo.kl_coef has no value: an override is key=value (algo.kl_coef=<value>), ~key "
                                 "removes one."),
    (["algo.kl_coef=[0.1"], "'algo.kl_coef=[0.1' cannot be parsed (no viable alternative at input '[0.1'); a value "
                            "with brackets, braces, commas, spaces, quotes or ~ is quoted whole: "
                            "algo.kl_coef='<value>'."),
    (["data.dataset=a\"b"], "'data.dataset=a\"b' cannot be parsed (unexpected '\"'); a value with brackets, braces, "
                            "commas, spaces, quotes or ~ is quoted whole: data.dataset='<value>'."),
    (["hydra.run.dir=~/runs/a"], "'hydra.run.dir=~/runs/a': Hydra does not expand ~ (your shell does, unquoted); "
                                 "write the path out: hydra.run.dir=$HOME/runs/a"),
    (["~data.batch_size"], "~data.batch_size cannot remove data.batch_size: every setting of data is read by the "
                           "run; set it instead (data.batch_size=<value>), or see its default with `python train.py "
                           "--cfg job`."),
    (["algo.kl_coef=range(0,1,0.5)"], "algo.kl_coef=range(0,1,0.5) is a sweep, which runs with -m: python train.py "
                                      "-m 'algo.kl_coef=range(0,1,0.5)' ..."),
    (["algo.kl_coef=tag(log,interval(0.01,1))"],
     "algo.kl_coef=tag(log,interval(0.01,1)) is a search space, which a search sweeper samples with -m: python "
     "train.py -m hydra/sweeper=optuna 'algo.kl_coef=tag(log,interval(0.01,1))' ..."),
    # Hydra's own line: "Config group override must be a string or a list. Got NoneType"
    (["logger=null"], "logger=null: logger is a config group, whose options are files; leave it out with ~logger."),
    (["logger=false"], "logger=false: logger is a config group, whose options are files; leave it out with ~logger."),
    (["env=null"], "env=null: env is a config group, whose options are files; leave it out with env=none."),
])
def test_a_misused_override_form_is_named_with_the_form_meant(overrides, line):
    assert composition_line(*overrides) == line


@pytest.mark.integration
def test_an_interval_given_to_the_default_sweeper_names_the_sweeper_that_samples_it(tmp_path):
    from tests.apps import ROOT, run_app

    result = run_app("train.py", "-m", f"hydra.sweep.dir={tmp_path}", "algo.kl_coef=tag(log,interval(0.01,1))",
                     cwd=ROOT)
    assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (2, (
        "error: algo.kl_coef=tag(log,interval(0.01,1)): interval(...) is a search space, which a search sweeper "
        "samples (Optuna's: python train.py -m hydra/sweeper=optuna 'algo.kl_coef=tag(log,interval(0.01,1))'); the "
        "default sweeper runs listed values: key=a,b,c, choice(a,b) or range(start,stop,step)."))


def test_a_tilde_on_what_the_apps_own_config_reads_names_it():
    """train_sft.py's config reads ${model} (its tuning file): composing failed on the interpolation; train_dpo.py's
    data is a pairs option, placed at data."""
    from lit_rlhf.cli.composition import composed, composition_error

    for app, key, line in [
        ("train_sft", "model", "~model removed model, which this run reads; choose one instead: model=causal_lm|"),
        ("train_dpo", "data", "~data removed data, which this run reads; drop ~data and set the keys under it instead "
                              "(data.<key>=<value>)."),
    ]:
        err = composed(CONF, app, [f"~{key}"])
        assert isinstance(err, BaseException)
        assert composition_error(err, CONF, app, [f"~{key}"]).startswith(line)
    assert composition_line("~seed2") == "~seed2 removes nothing: it is not a setting (did you mean 'seed'?)."


def test_a_plus_that_adds_what_is_not_there_is_not_blamed_for_another_mistake():
    assert composition_line("+trainer.deterministic=true", "algo.kl_coeff=1").startswith(
        "algo.kl_coeff is not a setting (did you mean 'kl_coef'?)")


def interpolation_error(cfg, key):
    """What reading cfg's key raises, as the apps read settings (attribute by attribute)."""
    parent, _, name = key.rpartition(".")
    with pytest.raises(InterpolationKeyError) as caught:
        getattr(OmegaConf.select(cfg, parent), name)
    return caught.value


def test_a_dollar_brace_the_user_typed_names_the_override(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py", "model.name_or_path=${oops}"])
    cfg = OmegaConf.create({"model": {"name_or_path": "${oops}"}, "data": {"tokenizer": "${model.name_or_path}"}})
    assert removed_or_unresolved_line(interpolation_error(cfg, "data.tokenizer")) == (
        "model.name_or_path=${oops} cannot be resolved: oops is not a setting of the config; a ${...} names one, e.g. "
        "${model.name_or_path} (`--cfg job` prints them).")


def test_a_dollar_brace_from_a_config_file_names_the_setting_that_holds_it(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py"])
    cfg = OmegaConf.create({"reward": {"url": "${server.url}"}})
    assert removed_or_unresolved_line(interpolation_error(cfg, "reward.url")) == (
        "reward.url=${server.url} cannot be resolved: Interpolation key 'server.url' not found; fix its ${...} on the "
        "command line or in the config file that sets it.")


def test_a_resolver_that_fails_names_the_override_that_called_it(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py", "model.name_or_path=${oc.env:LIT_RLHF_NO_SUCH_VARIABLE}"])
    cfg = OmegaConf.create({"model": {"name_or_path": "${oc.env:LIT_RLHF_NO_SUCH_VARIABLE}"}})
    with pytest.raises(InterpolationResolutionError) as caught:
        OmegaConf.to_container(cfg, resolve=True)
    caught.value.full_key = None  # as the apps meet it: raised where no key is known
    line = removed_or_unresolved_line(caught.value)
    assert line.startswith("model.name_or_path=${oc.env:LIT_RLHF_NO_SUCH_VARIABLE} cannot be resolved: ")
    assert "LIT_RLHF_NO_SUCH_VARIABLE' not found" in line


def test_a_group_removed_with_a_tilde_names_the_tilde_and_the_options(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py", "~model"])
    cfg = OmegaConf.create({"data": {"tokenizer": "${model.tokenizer_name_or_path}"}})
    line = removed_or_unresolved_line(interpolation_error(cfg, "data.tokenizer"))
    assert line.startswith("~model removed model, which this run reads (data.tokenizer holds "
                           "${model.tokenizer_name_or_path}); choose one instead: model=")
    assert "|tiny|" in line
    OmegaConf.set_struct(cfg, True)
    with pytest.raises(ConfigAttributeError) as caught:
        _ = cfg.model
    assert removed_or_unresolved_line(caught.value).startswith("~model removed model, which this run reads; choose")


def test_a_missing_key_nobody_removed_is_not_a_user_mistake(monkeypatch):
    """A key the code reads and the config lacks, with no ~ typed, is the library's error: its traceback stays."""
    monkeypatch.setattr(sys, "argv", ["train.py", "seed=1"])
    cfg = OmegaConf.create({"data": {}})
    OmegaConf.set_struct(cfg, True)
    with pytest.raises(ConfigAttributeError) as caught:
        _ = cfg.model
    assert removed_or_unresolved_line(caught.value) is None
    assert removed_or_unresolved_line(ValueError("x")) is None
