"""`python train_reward_model.py data.dataset=pairs.jsonl` as a user types it: it trains, saves a folder that
`python train.py reward=reward_model reward.name_or_path=<folder> reward.normalize=true` trains against, and bad
preference data is one line (exit code 2)."""

import json
import re

import pytest

from tests.algos.test_reward_model import separable_pairs
from tests.apps import run_app
from tests.helpers import FAST, one_line_error


def test_a_reward_model_trained_from_the_command_line_is_the_reward_of_an_rl_run(tmp_path):
    separable_pairs(tmp_path / "pairs.jsonl", n=96)
    trained = run_app("train_reward_model.py", "data.dataset=pairs.jsonl", "algo.optimizer.lr=3e-3", "epochs=2",
                      cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    folder = re.search(r"Reward model: (\S+)", trained.stdout).group(1)
    run_dir = re.search(r"Run directory: (\S+)", trained.stdout).group(1)
    result = json.loads((tmp_path / run_dir / "result.json").read_text())
    assert result["status"] == "ok" and result["objective"] >= 0.9  # val/accuracy, the sweep objective
    rl = run_app("train.py", *FAST, "reward=reward_model", f"reward.name_or_path={folder}",
                 "reward.dtype=float32", "reward.normalize=true", "callbacks.evaluation=null", cwd=tmp_path)
    assert rl.returncode == 0, rl.stderr[-3000:]


@pytest.mark.parametrize("rows, expected", [
    ([{"prompt": "Q", "answer": " a"}], "row 1: no 'chosen' column (it has ['answer', 'prompt'])"),
    ([{"prompt": "Q", "chosen": " a", "rejected": " a"}] * 4, "chosen equals rejected on every one of its 4 rows"),
])
def test_bad_preference_data_is_one_line(tmp_path, rows, expected):
    (tmp_path / "pairs.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = run_app("train_reward_model.py", "data.dataset=pairs.jsonl", cwd=tmp_path)
    assert expected in one_line_error(result)


def test_the_python_example_of_docs_preferences_runs(tmp_path, monkeypatch):
    """docs/preferences.md's example, with the embedded backbone in place of the hub name (no network here)."""
    from pathlib import Path

    from tests.conftest import TINY_PYTHIA

    text = (Path(__file__).resolve().parents[1] / "docs" / "preferences.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text.split("## From Python", 1)[1], re.S)
    separable_pairs(tmp_path / "pairs.jsonl", n=24)
    monkeypatch.chdir(tmp_path)
    quiet = "L.Trainer(max_epochs=1, accelerator='cpu', logger=False, enable_checkpointing=False)"
    code = code.replace('"EleutherAI/pythia-160m"', repr(str(TINY_PYTHIA))).replace("L.Trainer(max_epochs=1)", quiet)
    exec(compile(code, "docs/preferences.md", "exec"), {})
    assert (tmp_path / "my_reward_model" / "model.safetensors").is_file()
    assert (tmp_path / "my_reward_model" / "reward_stats.json").is_file()


def test_dpo_from_the_command_line_saves_a_policy_that_evaluate_py_compares_with_its_start(tmp_path):
    separable_pairs(tmp_path / "pairs.jsonl", n=64)
    trained = run_app("train_dpo.py", "data.dataset=pairs.jsonl", "algo.optimizer.lr=3e-3", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    command = re.search(r"python evaluate.py (.+)", trained.stdout).group(1).split()
    evaluated = run_app("evaluate.py", *command, "data.num_eval_prompts=4", cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "score difference (policy - reference)" in evaluated.stdout
