"""A reward of the user's own, named on the command line from a fresh directory, as docs/tasks.md shows:
`PYTHONPATH=. python train.py reward._target_=myrewards.sum_correct` (a function reading a dataset column, or a
class with arguments)."""

import csv
import os
import re
import shlex

import pytest

from tests.apps import run_app
from tests.helpers import FAST, ROOT, one_line_error

pytestmark = pytest.mark.integration  # runs a Trainer or an app

TASKS_DOC = (ROOT / "docs" / "tasks.md").read_text()
DOC_REWARDS = re.search(r"```python\n# myrewards.py\n(.*?)```", TASKS_DOC, re.S).group(1)  # as the docs show it
REWARDS = DOC_REWARDS + '''

def reward_len(completions, **kwargs):
    """TRL's GRPO quickstart reward, as written for TRL."""
    return [-abs(20 - len(completion)) for completion in completions]


def raises(prompts, completions):
    raise ValueError("no score for this \x1b[2J completion")
'''
RAISES_LINE = next(n for n, line in enumerate(REWARDS.splitlines(), 1) if "raise ValueError" in line)


def run_in_fresh_dir(tmp_path, *args, env: dict | None = None):
    (tmp_path / "myrewards.py").write_text(REWARDS)
    return run_app("train.py", *FAST, *args, cwd=tmp_path, env={"PYTHONPATH": f"{ROOT}{os.pathsep}.", **(env or {})})


def logged(tmp_path, key: str) -> list[float]:
    path = next(tmp_path.glob("logs/*/runs/*/csv/metrics.csv"))
    return [float(row[key]) for row in csv.DictReader(path.open()) if row.get(key)]


def test_a_function_reward_reading_a_column_from_the_command_line(tmp_path):
    result = run_in_fresh_dir(tmp_path, "experiment=arithmetic_grpo", "reward._target_=myrewards.sum_correct",
                              "algo.response_length=10")
    assert result.returncode == 0, result.stderr[-3000:]
    assert logged(tmp_path, "rewards/sum_correct/mean")  # the reward ran under its own name


def test_a_class_reward_with_arguments_from_the_command_line(tmp_path):
    result = run_in_fresh_dir(tmp_path, "reward._target_=myrewards.Length", "+reward.scale=0.0")
    assert result.returncode == 0, result.stderr[-3000:]
    assert logged(tmp_path, "rewards/Length/mean") == [0.0]  # built with scale=0 (the default 1 scores > 0)


def test_a_misspelled_reward_target_is_one_line(tmp_path):
    result = run_in_fresh_dir(tmp_path, "reward._target_=myrewards.sum_corect")
    assert one_line_error(result) == ("error: reward._target_='myrewards.sum_corect' cannot be imported: module "
                                      "'myrewards' has no 'sum_corect' (did you mean 'sum_correct'?).")


def test_a_reward_that_raises_is_one_line_and_hydra_full_error_shows_its_traceback_first(tmp_path):
    """As the line says: with HYDRA_FULL_ERROR=1 the traceback through the user's function comes before it (the
    apps set HYDRA_FULL_ERROR themselves for Hydra's use; the user's choice is the one that counts), escaped."""
    result = run_in_fresh_dir(tmp_path, "reward._target_=myrewards.raises")
    line = one_line_error(result)
    assert line.startswith("error: the reward raises raised ValueError: no score for this \\x1b[2J completion on "
                           "prompt "), line
    assert line.endswith("; fix the reward (the traceback: HYDRA_FULL_ERROR=1)."), line
    shown = run_in_fresh_dir(tmp_path, "reward._target_=myrewards.raises", env={"HYDRA_FULL_ERROR": "1"})
    assert shown.returncode == 2 and shown.stderr.strip().splitlines()[-1] == line
    assert f'myrewards.py", line {RAISES_LINE}, in raises' in shown.stderr  # the user's frame
    assert "Traceback (most recent call last)" in shown.stderr and "\x1b" not in shown.stderr
    assert run_in_fresh_dir(tmp_path, "reward._target_=myrewards.raises",
                            env={"HYDRA_FULL_ERROR": "0"}).stderr.count("Traceback") == 0


def test_several_rewards_of_your_own_with_weights_as_trls_reward_funcs_and_reward_weights(tmp_path):
    result = run_in_fresh_dir(tmp_path, "reward._target_=[myrewards.reward_len,myrewards.Length]",
                              "+reward.weights.Length=0.0")
    assert result.returncode == 0, result.stderr[-3000:]
    assert logged(tmp_path, "rewards/Length/mean")[0] > 0 and logged(tmp_path, "rewards/vader/mean") == []
    assert logged(tmp_path, "objective/scores") == logged(tmp_path, "rewards/reward_len/mean")  # Length weighs 0


def test_the_docs_list_of_rewards_runs_as_typed(tmp_path):
    """docs/tasks.md's last command line: its two rewards from the file above, one of them weighted."""
    typed = [line for line in TASKS_DOC.splitlines() if line.startswith("PYTHONPATH=. python train.py")][-1]
    result = run_in_fresh_dir(tmp_path, *shlex.split(typed)[3:], "algo.response_length=10")
    assert result.returncode == 0, result.stderr[-3000:]
    assert logged(tmp_path, "rewards/sum_correct/mean") and logged(tmp_path, "rewards/Length/mean")[0] > 0


@pytest.mark.parametrize(("overrides", "line"), [
    (["reward._target_=[myrewards.reward_len,myrewards.Length]", "+reward.weights.length=2"],
     "reward.weights.length weighs no reward of reward._target_ (its rewards: reward_len, Length);"),
    (["reward._target_=[myrewards.reward_len,myrewards.reward_len]"],
     "reward._target_=['myrewards.reward_len', 'myrewards.reward_len'] must name one or more rewards, each once"),
    (["reward._target_=[myrewards.reward_len,myrewards.Length]", "reward.weights.Length=2"],
     "reward.weights.Length is not a setting of the reward group's file; the weight of your own reward Length is added "
     "with a +: +reward.weights.Length=2"),
    (["reward._target_=[myrewards.reward_len,myrewards.Length]", "+reward.scale=2"],
     "reward.scale is an argument, and reward._target_ names several rewards"),
])
def test_a_bad_list_of_rewards_is_one_line(overrides, line, tmp_path):
    assert one_line_error(run_in_fresh_dir(tmp_path, *overrides)).startswith(f"error: {line}")


def test_an_argument_typed_without_its_plus_is_one_line_that_shows_it(tmp_path):
    result = run_in_fresh_dir(tmp_path, "reward._target_=myrewards.Length", "reward.scale=0.5")
    assert one_line_error(result) == ("error: reward.scale is not a setting of the reward group's file; an argument of "
                                      "your own myrewards.Length is added with a +: +reward.scale=0.5")


def test_a_gold_reward_class_of_your_own_over_a_gold_file_is_built_with_its_arguments(tmp_path):
    result = run_in_fresh_dir(tmp_path, "gold=vader", "gold._target_=myrewards.Length", "+gold.scale=0.0")
    assert result.returncode == 0, result.stderr[-3000:]
    assert logged(tmp_path, "gold/score") == [0.0]  # Length(scale=0), not VADER's score


def test_a_gold_reward_function_of_your_own_over_gold_none_is_called_with_the_texts(tmp_path):
    result = run_in_fresh_dir(tmp_path, "experiment=arithmetic_grpo", "+gold._target_=myrewards.sum_correct",
                              "algo.response_length=10")
    assert result.returncode == 0, result.stderr[-3000:]  # it was called with nothing, a TypeError
    assert len(logged(tmp_path, "gold/score")) == 1


def test_a_reward_written_for_trl_runs_as_written(tmp_path):
    result = run_in_fresh_dir(tmp_path, "algo=grpo", "reward._target_=myrewards.reward_len")
    assert result.returncode == 0, result.stderr[-3000:]  # it was called (prompts, completions): a TypeError
    assert logged(tmp_path, "rewards/reward_len/mean")[0] <= 0
