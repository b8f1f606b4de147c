"""docs/algorithms.md's Python examples (GRPO with a column-reading reward on the user's own JSONL, PPO,
REINFORCE++) run as written (2 RL steps each instead of 10), in a fresh directory, and train."""

import re
from pathlib import Path

import pytest

from tests.apps import run_app

pytestmark = pytest.mark.integration  # runs a Trainer or an app

DOCS = Path(__file__).resolve().parents[1] / "docs" / "algorithms.md"


def test_the_python_examples_of_every_algorithm_run_as_written(tmp_path):
    section = DOCS.read_text().split("## From Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    script = "\n".join(blocks) + "\nprint('episodes', grpo.episode, ppo.episode, reinforce.episode)\n"
    assert script.count("rl_steps=10") == 3
    (tmp_path / "examples.py").write_text(script.replace("rl_steps=10", "rl_steps=2"))
    result = run_app(str(tmp_path / "examples.py"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "episodes 64 64 64"  # 2 RL steps x 8 prompts x 4 samples
