"""A user's own environment from the command line (a module on PYTHONPATH): mistakes in it are one line
before any training step; a working one trains."""

import os

import pytest

from tests.helpers import FAST, ROOT, one_line_error, run_script

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
    return run_script("train.py", *FAST, "env=calculator", *args, cwd=tmp_path,
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


def test_a_user_environment_from_the_command_line_trains(tmp_path):
    result = run_with_user_env(tmp_path, "env.factory._target_=myenvs.Shouting")
    assert result.returncode == 0, result.stderr[-2000:]
