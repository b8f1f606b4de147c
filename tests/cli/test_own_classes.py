"""A teacher or a rollout engine of the user's own, named on the command line as docs/extending.md shows:
`PYTHONPATH=. python train.py algo=distill teacher._target_=my_teachers.MyTeacher` and
`rollout._target_=my_engines.MyEngine`, each built with the settings its constructor takes."""

import csv
import os

import pytest
from omegaconf import OmegaConf

from lit_rlhf.cli.own_components import CONFIG_DIR, your_own_class
from lit_rlhf.errors import ConfigError
from lit_rlhf.rollout import HFEngine, RolloutEngine
from tests.apps import run_app
from tests.helpers import FAST, ROOT

OWN_CLASSES = '''
import torch

from lit_rlhf.rollout import RolloutEngine


class MyTeacher:
    """Gives every sampled token the same logprob."""

    def __init__(self, level: float = -0.5):
        self.level = level

    def logprobs(self, queries, query_mask, responses, response_mask, temperature, columns):
        return torch.where(response_mask, torch.full(responses.shape, self.level), torch.zeros(responses.shape))


class MyEngine(RolloutEngine):
    """Samples `length` copies of one token for every context."""

    def __init__(self, length: int = 2):
        self.length = length

    def generate_turn(self, sampling, contexts, max_new_tokens, from_reference, greedy):
        return [([5] * min(self.length, max_new_tokens), None) for _ in contexts]
'''


def run_in_fresh_dir(tmp_path, *args):
    (tmp_path / "my_classes.py").write_text(OWN_CLASSES)
    return run_app("train.py", *FAST, *args, cwd=tmp_path, env={"PYTHONPATH": f"{ROOT}{os.pathsep}."})


def last_logged(tmp_path, key: str) -> float:
    path = next(tmp_path.glob("logs/*/runs/*/csv/metrics.csv"))
    return [float(row[key]) for row in csv.DictReader(path.open()) if row.get(key)][-1]


@pytest.mark.integration
def test_a_teacher_of_your_own_is_built_with_its_own_argument_and_not_the_causal_lm_settings(tmp_path):
    result = run_in_fresh_dir(tmp_path, "algo=distill", "teacher._target_=my_classes.MyTeacher", "+teacher.level=-0.25")
    assert result.returncode == 0, result.stderr[-3000:]
    assert last_logged(tmp_path, "distill/teacher_logprob_mean") == pytest.approx(-0.25)  # not its default -0.5


@pytest.mark.integration
def test_an_engine_of_your_own_samples_the_run(tmp_path):
    result = run_in_fresh_dir(tmp_path, "rollout._target_=my_classes.MyEngine", "+rollout.length=3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert last_logged(tmp_path, "completions/mean_length") == 3  # its 3 tokens, not generate()'s 8


class TakesNothing(RolloutEngine):
    pass


class TakesTwo(RolloutEngine):
    def __init__(self, compile_mode=None, length: int = 1):
        self.compile_mode, self.length = compile_mode, length


class TakesAll(RolloutEngine):
    def __init__(self, **settings):
        self.settings = settings


class SubclassOfHF(HFEngine):
    pass


class PassesOnToHF(HFEngine):
    def __init__(self, length: int = 1, **settings):
        super().__init__(**settings)
        self.length = length


def own_rollout(target: str, **typed):
    """The hf rollout group's file with `rollout._target_=<target>` and the keys typed on the command line (each
    replacing the file's value or added), after the check."""
    rollout = {**OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "rollout" / "hf.yaml")), "_target_": target,
               **typed}
    cfg = OmegaConf.create({"rollout": rollout})
    your_own_class(cfg, "rollout", typed=["rollout._target_", *(f"rollout.{name}" for name in typed)])
    return OmegaConf.to_container(cfg.rollout)


def test_an_own_class_gets_the_group_settings_its_constructor_names_and_its_typed_arguments():
    here = __name__
    assert own_rollout(f"{here}.TakesNothing") == {"_target_": f"{here}.TakesNothing"}
    assert own_rollout(f"{here}.TakesTwo", length=4) == {"_target_": f"{here}.TakesTwo", "compile_mode": "auto",
                                                         "length": 4}
    hf_settings = own_rollout("lit_rlhf.rollout.HFEngine")
    assert own_rollout(f"{here}.TakesAll", length=4) == {"_target_": f"{here}.TakesAll", "length": 4}
    assert own_rollout(f"{here}.SubclassOfHF") == {**hf_settings, "_target_": f"{here}.SubclassOfHF"}
    assert own_rollout(f"{here}.PassesOnToHF", length=4) == {**hf_settings, "_target_": f"{here}.PassesOnToHF",
                                                             "length": 4}
    assert hf_settings["_target_"] == "lit_rlhf.rollout.HFEngine" and "token_sampler" in hf_settings  # untouched


def test_a_file_setting_typed_for_an_own_class_reaches_it_or_is_refused_never_dropped():
    here = __name__
    assert own_rollout(f"{here}.TakesAll", compile_mode="default") == {"_target_": f"{here}.TakesAll",
                                                                       "compile_mode": "default"}
    assert own_rollout(f"{here}.TakesTwo", compile_mode="default")["compile_mode"] == "default"
    with pytest.raises(ConfigError) as err:
        own_rollout(f"{here}.TakesNothing", compile_mode="default")
    assert str(err.value).startswith(f"rollout.compile_mode is not an argument of {here}.TakesNothing")


@pytest.mark.parametrize(("target", "typed", "line"), [
    ("TakesTwo", {"lenght": 4}, "rollout.lenght is not an argument of {here}.TakesTwo (it takes compile_mode, length)"),
    ("TakesNothing", {"length": 4}, "rollout.length is not an argument of {here}.TakesNothing (it takes no arguments)"),
    ("no_such_module.Engine", {}, "rollout._target_='no_such_module.Engine' cannot be imported"),
    ("own_rollout", {}, "rollout._target_='{here}.own_rollout' is not a class"),
])
def test_a_bad_own_class_is_one_line(target, typed, line):
    here = __name__
    target = target if "." in target else f"{here}.{target}"
    with pytest.raises(ConfigError) as err:
        own_rollout(target, **typed)
    assert str(err.value).startswith(line.format(here=here))


@pytest.mark.parametrize("typed", ["nope", "", 5])
def test_a_plain_value_where_evaluate_builds_its_judge_is_one_line(typed):
    """`python evaluate.py judge=nope` ended in Hydra's traceback: "Cannot instantiate config of type str"."""
    from lit_rlhf.cli.own_components import evaluation_judge

    cfg = OmegaConf.create({"judge": typed})
    with pytest.raises(ConfigError) as err:
        your_own_class(cfg, "judge", evaluation_judge())
    assert str(err.value) == (
        f"judge={typed!r}: judge is a mapping of settings, the class to build (_target_) and its arguments; set them "
        f"one by one (judge.<key>=<value>) or give it whole, quoted: 'judge={{_target_: <a class>, <key>: <value>}}'; "
        f"null: the default.")
    your_own_class(OmegaConf.create({"judge": None}), "judge", evaluation_judge())  # null: RewardJudge


def test_a_target_that_cannot_be_imported_is_our_one_line_without_hydras_log_lines(caplog):
    from lit_rlhf.cli.own_components import imported_target

    with pytest.raises(ConfigError, match="reward._target_='no_such_module.thing' cannot be imported"):
        imported_target("reward._target_", "no_such_module.thing")
    assert [record for record in caplog.records if record.name == "hydra.utils"] == []  # its 3-line ERROR
