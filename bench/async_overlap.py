"""Synchronous against asynchronous (algo.max_staleness = 1, 2; algo.async_draws rollouts drawn at once) on 2 CPU
cores, as a user runs them:

    python bench/async_overlap.py        # ~25 min on 2 CPU cores

(a) `python train.py experiment=calculator_grpo` with a calculator tool answering after 200 ms
(bench/slow_tools.py) and the reward served by `python -m lit_rlhf.serve` answering after 200 ms
(bench/latency_reward.py, `reward=http`); (b) the embedded sentiment default `python train.py`. The same seed and
prompts in every run; the producer and the trainer share the machine's cores (torch's threads), nothing pinned.
Reports episodes per second of training (RL steps' episodes over the sum of their time/step_s, steps 2..N: the
first warms up), the median seconds per RL step, the producer's and the trainer's idle fractions, and the held-out
figure of the end-of-run evaluation with its 95% interval ((a) exact match, (b) the score's gain over the reference);
the held-out curve against episodes is in the .json. Writes bench/results/async_overlap.md and .json and the table
into docs/async.md.
"""

from __future__ import annotations

import csv
import json
import os
import re
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
MODES = ((None, 1), (1, 1), (1, 2), (2, 3))  # (algo.max_staleness, algo.async_draws); None: synchronous
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONPATH": f"{ROOT}{os.pathsep}{BENCH}"}


def serve() -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen([sys.executable, "-m", "lit_rlhf.serve", "port=0",
                               "reward._target_=latency_reward.arithmetic_after_200ms"], cwd=BENCH, env=ENV,
                              stdout=subprocess.PIPE, text=True)
    return server, re.search(r"http://[\d.]+:\d+", server.stdout.readline()).group()


def task_args(task: str, url: str) -> list[str]:
    if task == "calculator":
        return ["experiment=calculator_grpo", "env.factory._target_=slow_tools.SlowCalculatorEnvironment",
                "reward=http", f"reward.url={url}"]
    return ["steps=100", "trainer.val_check_interval=25"]


def run(task: str, staleness: int | None, draws: int, url: str, out: Path) -> dict:
    run_dir = out / f"{task}_{staleness}_{draws}"
    setting = [] if staleness is None else [f"algo.max_staleness={staleness}", f"algo.async_draws={draws}"]
    command = ["train.py", *task_args(task, url), *setting, "callbacks.generation_samples=null",
               f"hydra.run.dir={run_dir}"]
    start = time.time()
    subprocess.run([sys.executable, *command], cwd=ROOT, env=ENV, check=True, capture_output=True)
    wall = time.time() - start
    rows = list(csv.DictReader((run_dir / "csv" / "metrics.csv").open()))
    steps = [r for r in rows if r.get("time/step_s")][1:]
    step_s = [float(r["time/step_s"]) for r in steps]
    episodes_per_step = float(steps[1]["episode"]) - float(steps[0]["episode"])
    figure = "eval/exact_match" if task == "calculator" else "eval/scores"
    curve = [(float(r["episode"]) if r.get("episode") else None, int(r["step"]), float(r[figure]))
             for r in rows if r.get(figure)]
    evaluation = json.loads((run_dir / "evaluation" / "evaluation.json").read_text())
    held_out = (evaluation["task_metrics"]["exact_match"]["policy"]["accuracy"] if task == "calculator"
                else evaluation["score_difference"])

    def mean_of(key: str) -> float | None:
        values = [float(r[key]) for r in steps if r.get(key)]
        return statistics.mean(values) if values else None

    return {"task": task, "max_staleness": staleness, "async_draws": draws, "command": " ".join(command[1:-1]),
            "wall_s": wall,
            "episodes_per_s": episodes_per_step * len(step_s) / sum(step_s), "step_s_median": statistics.median(step_s),
            "producer_idle_frac": mean_of("async/producer_idle_frac"),
            "trainer_idle_frac": mean_of("async/trainer_idle_frac"), "held_out": held_out,
            "curve": curve}


def fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def interval(value: dict, percent: bool) -> str:
    if percent:
        return f"{value['mean']:.1%} [{value['ci_low']:.1%}, {value['ci_high']:.1%}]"
    return f"{value['mean']:+.3f} [{value['ci_low']:+.3f}, {value['ci_high']:+.3f}]"


def main() -> None:
    server, url = serve()
    try:
        with tempfile.TemporaryDirectory() as out:
            results = [run(task, s, draws, url, Path(out)) for task in ("calculator", "sentiment")
                       for s, draws in MODES]
    finally:
        server.terminate()
        server.wait()
    lines = ["| task | mode | episodes/s | s per RL step (median) | speed-up | producer idle | trainer idle | "
             "held-out after the run (95% interval) |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        sync = next(s for s in results if s["task"] == r["task"] and s["max_staleness"] is None)
        mode = ("synchronous" if r["max_staleness"] is None
                else f"async, S={r['max_staleness']}, {r['async_draws']} drawn at once")
        task = ("(a) calculator, 200 ms tool + 200 ms reward server: exact match" if r["task"] == "calculator"
                else "(b) sentiment default: score gain over the reference")
        lines.append(f"| {task} | {mode} | {r['episodes_per_s']:.1f} | {r['step_s_median']:.2f} | "
                     f"{r['episodes_per_s'] / sync['episodes_per_s']:.2f}x | {fraction(r['producer_idle_frac'])} | "
                     f"{fraction(r['trainer_idle_frac'])} | {interval(r['held_out'], r['task'] == 'calculator')} |")
    publish("async_overlap", {"runs": results, "tool_latency_s": 0.2, "reward_latency_s": 0.2}, lines,
            ["docs/async.md"])


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
