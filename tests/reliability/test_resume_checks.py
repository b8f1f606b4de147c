"""A resume refuses setting changes that break exactness and applies (and reports) the others."""

import csv

import pytest

from lit_rlhf.algos.resume_checks import check_resume, check_resumed_lr
from lit_rlhf.errors import ConfigError
from tests.helpers import FAST, one_line_error, run_script


def test_changes_that_break_exactness_are_refused_and_steering_ones_applied():
    saved = {"rloo_k": 4, "max_grad_norm": 1.0, "model": {"name_or_path": "a", "lora": {"r": 8}}}
    assert check_resume(saved, dict(saved), {"batch_size": 8}, {"batch_size": 8}) == []
    assert check_resume(saved, {**saved, "max_grad_norm": 0.5}, None, None) == ["algo.max_grad_norm 1.0 -> 0.5"]
    with pytest.raises(ConfigError, match=r"resume changes algo.rloo_k \(4 -> 8\)"):
        check_resume(saved, {**saved, "rloo_k": 8}, None, None)
    with pytest.raises(ConfigError, match=r"resume changes algo.model"):
        check_resume(saved, {**saved, "model": {"name_or_path": "a", "lora": {"r": 16}}}, None, None)
    with pytest.raises(ConfigError, match=r"resume changes data.batch_size \(8 -> 16\)"):
        check_resume(saved, saved, {"batch_size": 8}, {"batch_size": 16})
    state = [{"param_groups": [{"lr": 1e-3, "initial_lr": 1e-3}]}]
    assert check_resumed_lr(state, 1e-3, has_scheduler=False) is None
    assert check_resumed_lr(state, 5e-4, has_scheduler=False) == "algo.optimizer.lr 0.001 -> 0.0005"
    with pytest.raises(ConfigError, match="under an lr scheduler"):
        check_resumed_lr(state, 5e-4, has_scheduler=True)


def test_resume_through_train_py_refuses_rloo_k_and_batch_size_and_applies_a_new_lr(tmp_path):
    run_dir = tmp_path / "run"
    first = run_script("train.py", f"hydra.run.dir={run_dir}", *FAST, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    resume = [f"hydra.run.dir={run_dir}", "ckpt_path=last", *FAST[1:], "steps=2"]
    assert "resume changes algo.rloo_k (4 -> 2)" in one_line_error(run_script("train.py", *resume, "algo.rloo_k=2",
                                                                              cwd=tmp_path))
    assert "resume changes data.batch_size (4 -> 8)" in one_line_error(
        run_script("train.py", *resume, "data.batch_size=8", cwd=tmp_path))
    applied = run_script("train.py", *resume, "algo.optimizer.lr=0.0005", cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr[-3000:]
    assert "Resume applies: algo.optimizer.lr 0.001 -> 0.0005." in applied.stdout + applied.stderr
    with open(run_dir / "csv" / "metrics.csv") as f:
        assert [float(r["lr"]) for r in csv.DictReader(f) if r["lr"]] == pytest.approx([0.001, 0.0005])
