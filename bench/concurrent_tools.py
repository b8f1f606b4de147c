"""Concurrent episodes: the calculator task with a tool of 200 ms latency, its episodes' tool calls one after
another (env.max_concurrency=1) against all at once (64), as a user runs it:

    python bench/concurrent_tools.py        # ~3 min on 2 CPU cores

`python train.py experiment=calculator_grpo steps=6` with the tool replaced by bench/slow_tools.py's, 16 prompts x
K samples a step. Reports the median seconds per RL step (time/step_s, steps 2-6: the first one
warms up) and the calls per step that reached the tool (a misnamed tool is answered at once), with their latency
summed: what one-after-another calls wait at most. The same seed samples the same episodes in both settings. Writes
bench/results/concurrent_tools.md and .json, and the table into docs/environments.md.
"""

from __future__ import annotations

import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from command_line import takes_no_options
from results_blocks import publish

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SETTINGS = (1, 64)  # one after another; every episode of a step at once


def run(max_concurrency: int, out: Path) -> dict:
    run_dir = out / f"concurrency{max_concurrency}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{BENCH}"}
    start = time.time()
    subprocess.run([sys.executable, "train.py", "experiment=calculator_grpo", "steps=6",
                    "env.factory._target_=slow_tools.SlowCalculatorEnvironment",
                    f"env.max_concurrency={max_concurrency}", "callbacks.evaluation=null",
                    "callbacks.generation_samples=null", "+trainer.limit_val_batches=0", f"hydra.run.dir={run_dir}"],
                   cwd=ROOT, env=env, check=True, capture_output=True)
    rows = [r for r in csv.DictReader((run_dir / "csv" / "metrics.csv").open()) if r.get("time/step_s")]
    steps = [float(r["time/step_s"]) for r in rows][1:]
    episodes = float(rows[0]["episode"])  # sequences of one RL step (the counter after the first)
    # calls that reached the tool (and its latency): a misnamed tool (`calc`) is answered at once, with an error
    calls = [(float(r["rollout/tool_calls_mean"]) - float(r["rollout/tool_errors"])) * episodes for r in rows][1:]
    return {"max_concurrency": max_concurrency, "episodes_per_step": episodes,
            "step_s_median": statistics.median(steps), "step_s": steps,
            "tool_calls_per_step": statistics.mean(calls), "wall_s": time.time() - start}


def main() -> None:
    with tempfile.TemporaryDirectory() as out:
        results = [run(n, Path(out)) for n in SETTINGS]
    sequential = results[0]
    lines = ["| `env.max_concurrency` | s per RL step (median, steps 2-6) | calls reaching the tool per step | their "
             "latency one after another (calls x 0.2 s) | speed-up |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['max_concurrency']} | {r['step_s_median']:.2f} | {r['tool_calls_per_step']:.0f} | "
                     f"{r['tool_calls_per_step'] * 0.2:.1f} s | "
                     f"{sequential['step_s_median'] / r['step_s_median']:.2f}x |")
    publish("concurrent_tools", {"runs": results, "latency_s": 0.2}, lines,
            ["docs/environments.md"])


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
