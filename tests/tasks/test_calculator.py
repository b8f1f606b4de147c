"""The embedded tool-use task learns, as a user runs it: a short `experiment=calculator_grpo` raises held-out
exact-match accuracy and the tool-call rate (eval/* at step 0 against the last validation)."""

import csv

from tests.helpers import run_script


def heldout_curve(run_root) -> list[dict[str, float]]:
    path = next(run_root.glob("logs/calculator_grpo/runs/*/csv/metrics.csv"))
    return [{k: float(v) for k, v in row.items() if v} for row in csv.DictReader(path.open())
            if row.get("eval/exact_match")]


def test_a_short_calculator_run_learns_to_call_its_tool_and_answers_right_more_often(tmp_path):
    result = run_script("train.py", "experiment=calculator_grpo", "steps=30", "trainer.val_check_interval=15",
                        "callbacks.evaluation=null", "callbacks.curves=null", "callbacks.generation_samples=null",
                        cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    curve = heldout_curve(tmp_path)
    first, last = curve[0], curve[-1]
    assert first["step"] == 0 and last["step"] >= 29
    assert last["eval/exact_match"] >= first["eval/exact_match"] + 0.2, (first, last)
    assert last["eval/tool_calls_mean"] >= first["eval/tool_calls_mean"] + 0.3, (first, last)
    assert "mean score" in result.stdout  # the training summary, with the conversations
    assert "[env: <result>" in result.stdout
