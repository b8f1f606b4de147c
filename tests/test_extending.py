"""docs/extending.md's "A new algorithm", followed literally: its code blocks written into a fresh folder as the files
their first lines name, then its command run there as the guide gives it (with the suite's short-run settings)."""

import csv
import re
import shlex
from pathlib import Path

import pytest

from tests.apps import run_app
from tests.helpers import FAST, ROOT

pytestmark = pytest.mark.integration  # runs the app

GUIDE = ROOT / "docs" / "extending.md"


def algorithm_section() -> str:
    return GUIDE.read_text().split("## A new algorithm")[1].split("\n## ")[0]


def write_guide_files(folder: Path) -> list[str]:
    """Every python/yaml block of the section into the file its first line names (`# my_algos/...`)."""
    written = []
    for body in re.findall(r"```(?:python|yaml)\n(.*?)```", algorithm_section(), re.S):
        path = re.match(r"# (\S+)", body).group(1)
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(body)
        written.append(path)
    return written


def guide_command() -> tuple[dict[str, str], list[str]]:
    """The section's shell command: its environment assignments and train.py's arguments."""
    line = re.search(r"```bash\n(.*?)\n```", algorithm_section(), re.S).group(1)
    words = shlex.split(line)
    env = dict(word.split("=", 1) for word in words[:words.index("python")])
    assert words[words.index("python") + 1] == "train.py"
    return env, words[words.index("python") + 2:]


def test_the_new_algorithm_guide_trains_as_written(tmp_path):
    assert write_guide_files(tmp_path) == ["my_algos/config.py", "my_algos/module.py", "my_algos/__init__.py",
                                           "my_algos/conf/algo/clipped_rloo.yaml", "my_algos/conf/__init__.py"]
    env, args = guide_command()
    assert env == {"PYTHONPATH": "."}
    result = run_app("train.py", *args, *[a for a in FAST if not a.startswith("steps=")], "steps=2", cwd=tmp_path,
                     env={"PYTHONPATH": f"{ROOT}:{tmp_path}"})
    assert result.returncode == 0, result.stderr[-3000:]
    run = next(tmp_path.glob("logs/train/runs/*"))
    metrics = csv.DictReader((run / "csv" / "metrics.csv").open())
    rows = [row for row in metrics if row.get("policy/advantages_clipped_frac")]
    assert len(rows) == 2 and all(0 <= float(row["policy/advantages_clipped_frac"]) <= 1 for row in rows)
    assert "advantage_clip: 0.2" in (run / ".hydra" / "config.yaml").read_text()  # the command line's value
