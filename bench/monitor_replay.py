"""The reward-hacking monitor's signs, replayed from a finished run's metrics (csv/metrics.csv) through the callback's
own logic (lit_rlhf.callbacks.RewardHackingMonitor at its default thresholds): the warnings the run printed, and how
far each watched metric went. bench/algorithms.py reports them for its runs.
"""

from __future__ import annotations

from pathlib import Path
from statistics import fmean

from fingerprint import rl_step_rows

from lit_rlhf.callbacks import RewardHackingMonitor

WATCHED = ("objective/scores", "objective/kl", "completions/mean_length", "completions/clipped_ratio",
           "completions/distinct_2")


def training_rows(run_dir: Path) -> list[dict[str, float]]:
    """The RL steps' watched metrics, in order."""
    return [{key: float(row[key]) for key in WATCHED if row.get(key)} for row in rl_step_rows(run_dir)]


def replay(run_dir: Path) -> dict:
    """{"warnings": [the monitor's warning of each sign, at its first RL step], "first": {sign: RL step}, "windows":
    {metric: [the mean of each `window` consecutive RL steps]}}."""
    monitor = RewardHackingMonitor()
    rows = training_rows(run_dir)
    first: dict[str, int] = {}
    warnings = []
    for rl_step, stats in enumerate(rows, start=1):
        for sign, holds in monitor.signs.update(stats).items():
            if holds and sign not in first:
                first[sign] = rl_step
                warnings.append(f"possible reward hacking at RL step {rl_step}: {monitor.describe(sign)}.")
    window = monitor.signs.window
    windows = {key: [fmean(r[key] for r in rows[i:i + window]) for i in range(len(rows) - window + 1)]
               for key in WATCHED if all(key in r for r in rows)}
    return {"warnings": warnings, "first": first, "windows": windows}


def table(runs: dict[str, dict]) -> list[str]:
    """{name (overrides): replay(...)} -> the markdown table and each run's warnings."""
    lines = ["| run | signs, at the RL step each first held | mean completion length: start -> longest | "
             "distinct-2: start -> lowest | objective/kl: last 10 steps |",
             "|---|---|---|---|---|"]
    for name, seen in runs.items():
        length, distinct = seen["windows"]["completions/mean_length"], seen["windows"]["completions/distinct_2"]
        kl = seen["windows"].get("objective/kl")
        signs = ", ".join(f"`{sign}` ({step})" for sign, step in seen["first"].items()) or "none"
        lines.append(f"| {name} | {signs} | {length[0]:.1f} -> {max(length):.1f} ({max(length) / length[0]:.2f}x) | "
                     f"{distinct[0]:.2f} -> {min(distinct):.2f} ({min(distinct) / distinct[0]:.2f}x) | "
                     f"{'not computed' if kl is None else f'{kl[-1]:.2f}'} |")
    for name, seen in runs.items():
        if seen["warnings"]:
            lines += ["", f"{name}, its warnings:", ""] + [f"- `{line}`" for line in seen["warnings"]]
    return lines
