"""A slow remote reward with and without overlap, on the embedded default as a user runs it.

    python bench/reward_overlap.py        # ~4 min on 2 CPU cores

Serves VADER with an injected 0.5 s latency per call (`python -m lit_rlhf.serve
reward._target_=latency_reward.vader_after_half_a_second`), then trains `python train.py reward=http
reward.url=... steps=N` with reward.overlap=true and false, and the in-process reward=vader (no latency) as the
floor; interleaved, `--repeats` times each. Reports the median seconds per RL step (time/step_s, steps 2..N) and
the reward's time and wait per step. Writes bench/results/reward_overlap.md and .json and the table into
docs/rewards.md.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from results_blocks import publish

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SETTINGS = ["+trainer.limit_val_batches=0", "callbacks.evaluation=null", "callbacks.generation_samples=null"]
CASES = {"served, overlap on": ["reward=http", "reward.overlap=true"],
         "served, overlap off": ["reward=http", "reward.overlap=false"],
         "in process, no latency": ["reward=vader"]}


def serve() -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": f"{BENCH}{os.pathsep}{ROOT}"}
    server = subprocess.Popen([sys.executable, "-m", "lit_rlhf.serve", "port=0",
                               "reward._target_=latency_reward.vader_after_half_a_second"], cwd=BENCH, env=env,
                              stdout=subprocess.PIPE, text=True)
    url = re.search(r"http://[\d.]+:\d+", server.stdout.readline()).group()
    return server, url


def train(case: str, url: str, steps: int, out: Path) -> dict:
    run_dir = out / re.sub(r"\W+", "_", case)
    overrides = list(CASES[case])
    if "reward=http" in overrides:
        overrides.append(f"reward.url={url}")
    subprocess.run([sys.executable, "train.py", f"steps={steps}", *SETTINGS, *overrides, f"hydra.run.dir={run_dir}",
                    "overwrite_run_dir=true"], cwd=ROOT, check=True, capture_output=True)
    rows = [r for r in csv.DictReader((run_dir / "csv" / "metrics.csv").open()) if r.get("time/step_s")]
    rows = rows[1:]  # the first step holds the start-up
    mean = lambda key: statistics.fmean(float(r[key]) for r in rows)  # noqa: E731
    return {"step_s": statistics.median(float(r["time/step_s"]) for r in rows), "reward_s": mean("time/reward_s"),
            "reward_wait_s": mean("time/reward_wait_s")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "logs" / "bench_reward_overlap")
    args = parser.parse_args()
    server, url = serve()
    try:
        runs = {case: [] for case in CASES}
        for _ in range(args.repeats):
            for case in CASES:
                runs[case].append(train(case, url, args.steps, args.out))
    finally:
        server.terminate()
        server.wait()
    results = {case: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for case, rs in runs.items()}
    lines = [f"Embedded default (`python train.py steps={args.steps}`), reward served with 0.5 s latency per call; "
             f"medians of {args.repeats} interleaved runs, RL steps 2..{args.steps}.", "",
             "| reward | s per RL step | reward s per step | step waited for it, s |", "|---|---:|---:|---:|"]
    lines += [f"| {case} | {r['step_s']:.3f} | {r['reward_s']:.3f} | {r['reward_wait_s']:.3f} |"
              for case, r in results.items()]
    on, off = results["served, overlap on"]["step_s"], results["served, overlap off"]["step_s"]
    lines += ["", f"Overlap saves {off - on:.3f} s per RL step ({(off - on) / off:.0%} of the step without it)."]
    data = {"steps": args.steps, "repeats": args.repeats, "latency_s": 0.5, "results": results, "runs": runs}
    publish("reward_overlap", data, lines, ["docs/rewards.md"])


if __name__ == "__main__":
    main()
