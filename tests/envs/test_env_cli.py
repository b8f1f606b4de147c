"""A user's own environment from the command line (a module on PYTHONPATH): mistakes in it are one line
before any training step; a working one trains."""

import os

import pytest

from tests.apps import run_app
from tests.helpers import FAST, ROOT, one_line_error

pytestmark = pytest.mark.integration  # runs a Trainer or an app

USER_MODULE = '''
from lit_rlhf.envs import Environment


def lookup(x):
    return x


def shout(text: str) -> str:
    """Upper-cases its argument.

    Args:
        text: what to shout
    """
    return text.upper()


class Undocumented(Environment):
    tools = [lookup]


class NeedsAnswer(Environment):
    tools = [shout]

    def __init__(self, answer: str):
        self.answer = answer


class Shouting(Environment):
    tools = [shout]
'''


def run_with_user_env(tmp_path, *args):
    (tmp_path / "myenvs.py").write_text(USER_MODULE)
    return run_app("train.py", *FAST, "env=calculator", *args, cwd=tmp_path,
                   env={"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"})


@pytest.mark.parametrize("target, expected", [
    ("myenvs.Undocumented", "error: the environment Undocumented: the tool 'lookup' has no usable schema"),
    ("myenvs.NeedsAnswer", "error: the environment needs the dataset column 'answer', which data.dataset="
                           "'sentiment' row 1 does not have"),
])
def test_a_broken_user_environment_is_one_line_before_any_step(tmp_path, target, expected):
    result = run_with_user_env(tmp_path, f"env.factory._target_={target}")
    assert one_line_error(result).startswith(expected)
    assert "RL step" not in result.stderr + result.stdout


def test_a_user_environment_from_the_command_line_trains_and_a_resume_keeps_its_episodes(tmp_path):
    result = run_with_user_env(tmp_path, "env.factory._target_=myenvs.Shouting", "hydra.run.dir=run")
    assert result.returncode == 0, result.stderr[-2000:]
    resumed = run_with_user_env(tmp_path, "env.factory._target_=myenvs.Shouting", "hydra.run.dir=run", "ckpt_path=last",
                                "steps=2", "env.max_turns=2")  # episodes of another shape: not an exact resume
    assert one_line_error(resumed).startswith("error: resume changes env.max_turns (3 -> 2); an exact resume")


def test_a_user_environments_checkpoint_is_evaluated_with_the_class_given_as_the_refusal_says(tmp_path):
    assert run_with_user_env(tmp_path, "env.factory._target_=myenvs.Shouting", "hydra.run.dir=run").returncode == 0
    evaluate = ["evaluate.py", "ckpt_path=run/checkpoints/last.ckpt", "samples_per_prompt=1", "num_bootstraps=50"]
    user_path = {"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    refused = one_line_error(run_app(*evaluate, cwd=tmp_path, env=user_path))
    assert refused.startswith("error: the checkpoint's env names 'myenvs.Shouting', which is not one of lit_rlhf's "
                              "env classes"), refused
    hinted = refused.split("your own class: ", 1)[1].split(" with the run's", 1)[0]
    assert hinted == "env=calculator env.factory._target_=<module.Class>"
    given = hinted.replace("<module.Class>", "myenvs.Shouting").split()
    result = run_app(*evaluate, *given, cwd=tmp_path, env=user_path)
    assert result.returncode == 0, result.stderr[-2000:]


def test_reward_environment_trains_on_each_episodes_own_score(tmp_path):
    """reward=environment: the score is Environment.reward() of each finished episode (a column the episode adds,
    not one of the prompts' rows); the calculator environment scores the final turn's answer."""
    import csv

    result = run_app("train.py", *FAST, "experiment=calculator_grpo", "reward=environment", "steps=2",
                     "hydra.run.dir=run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "run" / "csv" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("rewards/environment/mean")]
    assert len(rows) == 2 and all(0.0 <= float(r["rewards/environment/mean"]) <= 1.0 for r in rows)


def test_reward_environment_without_an_environment_is_one_line(tmp_path):
    line = one_line_error(run_app("train.py", *FAST, "reward=environment", cwd=tmp_path))
    assert line.startswith("error: the reward environment reads 'env_reward', a column the episodes of an "
                           "environment add; set env=<an environment>")
