"""bench/monitor_replay.py: the reward-hacking monitor's warnings replayed from a run's metrics.csv, as the callback
gives them during the run."""

import csv
import sys

from tests.apps import ROOT

BENCH = ROOT / "bench"


def write_metrics(run_dir, lengths):
    (run_dir / "csv").mkdir(parents=True)
    with open(run_dir / "csv" / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["step", "objective/scores", "completions/mean_length", "eval/scores"])
        writer.writeheader()
        writer.writerow({"step": 0, "eval/scores": 0.1})  # a validation row: not an RL step
        for step, length in enumerate(lengths):
            writer.writerow({"step": step, "objective/scores": 0.5, "completions/mean_length": length})


def test_a_length_jump_is_replayed_at_the_step_its_window_passes_twice_the_start(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        from monitor_replay import replay
    finally:
        sys.path.remove(str(BENCH))
    # 10 steps of 10 tokens, then 30: the mean of the last 10 steps at step k > 10 is 2k - 10, 20 (twice the start,
    # still inside the bound) at step 15 and 22 at step 16
    write_metrics(tmp_path, [10.0] * 10 + [30.0] * 10)
    seen = replay(tmp_path)
    assert seen["first"] == {"length_jump": 16}
    assert seen["warnings"] == ["possible reward hacking at RL step 16: mean completion length 10.00 -> 22.00."]
    assert seen["windows"]["completions/mean_length"][0] == 10.0
    assert max(seen["windows"]["completions/mean_length"]) == 30.0
    write_metrics(tmp_path / "quiet", [10.0] * 15 + [20.0] * 5)
    assert replay(tmp_path / "quiet")["warnings"] == []
