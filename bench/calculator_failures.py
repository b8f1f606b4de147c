"""Where GRPO's calculator policies fail, with LoRA (the experiment's default) and with full fine-tuning: the
experiment as typed, 150 RL steps, seed 0, once each, and its end-of-run evaluation (800 held-out episodes: 200
questions x 4 samples) sorted by what went wrong.

    python train.py experiment=calculator_grpo seed=0                   # LoRA
    python train.py experiment=calculator_grpo seed=0 model.lora=null   # full fine-tuning

    python bench/calculator_failures.py   # about 8 min on 2 CPU cores; runs stay in logs/bench_calculator_failures/

Kinds: a call of a tool that does not exist (`compute`, `calc`, `calculate`: the token LoRA cannot move, see
bench/tool_name_ceiling.py); the calculator called and its result copied wrong; no call (a guess); right. Writes
bench/results/calculator_failures.md and .json and the table into docs/distillation.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from results_blocks import ROOT, publish

RUNS = {"LoRA (r 16, all-linear)": [], "full fine-tuning": ["model.lora=null"]}
KINDS = ("right", "a tool that does not exist", "the result copied wrong", "no call", "other")


def kind(episode: str, score: float) -> str:
    if score > 0:
        return "right"
    if "<call>calculator(" in episode:
        result = re.search(r"<result>(\d+)</result>", episode)
        answer = re.search(r"Answer: (\S+)", episode)
        return "the result copied wrong" if result and answer and answer.group(1) != result.group(1) else "other"
    return "a tool that does not exist" if "<call>" in episode else "no call"


def first_validation(run_dir: Path) -> tuple[int, float]:
    """The RL step and held-out exact match of the first validation after step 0 (every 25 RL steps)."""
    steps_done = 0
    for row in csv.DictReader((run_dir / "csv" / "metrics.csv").open()):
        if row.get("time/step_s"):
            steps_done += 1
        elif row.get("eval/exact_match") and steps_done:
            return steps_done, float(row["eval/exact_match"])
    raise SystemExit(f"error: {run_dir} has no validation after step 0")


def run(label: str, work: Path) -> Path:
    run_dir = work / re.sub(r"\W+", "_", label).strip("_")
    if not (run_dir / "evaluation" / "generations.jsonl").exists():
        done = subprocess.run([sys.executable, "train.py", "experiment=calculator_grpo", "seed=0", *RUNS[label],
                               f"hydra.run.dir={run_dir}"], cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"error: the {label} run failed (exit code {done.returncode}): {done.stderr.strip()[-800:]}")
    return run_dir


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", type=Path, help="a folder this script filled: run what it lacks, then report")
    args = parser.parse_args()
    work = args.report or ROOT / "logs" / "bench_calculator_failures" / time.strftime("%Y-%m-%d_%H-%M-%S")
    rows, lines = [], ["`experiment=calculator_grpo seed=0`, 150 RL steps, its end-of-run evaluation (200 held-out "
                       "questions x 4 samples) by outcome, and the first validation on the way "
                       "(`python bench/calculator_failures.py`):", "",
                       "| policy | first validation (held-out exact match, 1 sample) | " + " | ".join(KINDS) + " |",
                       "|---|---|" + "---|" * len(KINDS)]
    for label in RUNS:
        run_dir = run(label, work)
        episodes = [json.loads(line) for line in (run_dir / "evaluation" / "generations.jsonl").open()]
        step, early = first_validation(run_dir)
        counts = Counter(kind(str(e["policy"]), float(e["policy_score"])) for e in episodes)
        shares = {k: counts[k] / len(episodes) for k in KINDS}
        rows.append({"policy": label, "overrides": RUNS[label], "episodes": len(episodes), "shares": shares,
                     "first_validation": {"step": step, "exact_match": early}})
        lines.append(f"| {label} | {early:.1%} at RL step {step} | " + " | ".join(f"{shares[k]:.1%}" for k in KINDS)
                     + " |")
    publish("calculator_failures", {"rows": rows}, lines, ["docs/distillation.md"])
