"""docs/algorithms.md's Python examples (GRPO with a column-reading reward on the user's own JSONL, PPO,
REINFORCE++) run as written, in a fresh directory, and train."""

import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "algorithms.md"


def test_the_python_examples_of_every_algorithm_run_as_written(tmp_path):
    section = DOCS.read_text().split("## From Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    script = "\n".join(blocks) + "\nprint('episodes', grpo.episode, ppo.episode, reinforce.episode)\n"
    (tmp_path / "examples.py").write_text(script)
    result = subprocess.run([sys.executable, "examples.py"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=900, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "episodes 320 320 320"  # 10 RL steps x 8 prompts x 4 samples
