"""The arithmetic task as a user runs it: `python train.py experiment=arithmetic_<algo> seed=<s>`.

    python bench/arithmetic.py                      # RLOO seeds 0 and 1, PPO, GRPO, REINFORCE++ seed 0; ~8 min
    python bench/arithmetic.py --runs rloo:0        # one run

Reports the end-of-run evaluation on the 200 held-out questions (4 samples each): exact-match accuracy of the
trained policy against its reference (the starting model, same seed), pass@4 and maj@4, each with its 95%
bootstrap interval; the held-out KL; the wall time. Writes bench/results/arithmetic.md and .json and the table
into docs/tasks.md; from the RLOO seed-0 run, its held-out samples at the start and the end
(bench/results/arithmetic_samples.md) and its curves (docs/images/arithmetic_rloo_curves.png), both shown there.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from results_blocks import publish

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def run(algo: str, seed: int, out: Path, overrides: tuple[str, ...] = (), name: str | None = None) -> dict:
    run_dir = out / f"{name or algo}_seed{seed}"
    start = time.time()
    subprocess.run([sys.executable, "train.py", f"experiment=arithmetic_{algo}", f"seed={seed}", *overrides,
                    f"hydra.run.dir={run_dir}", "overwrite_run_dir=true"], cwd=ROOT, check=True, capture_output=True)
    wall = time.time() - start
    summary = json.loads((run_dir / "evaluation" / "evaluation.json").read_text())
    rows = [r for r in csv.DictReader((run_dir / "csv" / "metrics.csv").open()) if r.get("eval/exact_match")]
    curve = [(int(r["step"]), float(r["eval/exact_match"])) for r in rows]
    kl = [float(r["eval/kl"]) for r in rows if r.get("eval/kl")]
    return {"algo": algo, "seed": seed, "wall_s": wall, "task": summary["task_metrics"]["exact_match"],
            "kl_after": kl[-1] if kl else None, "curve": curve, "run_dir": str(run_dir.relative_to(ROOT))}


def samples_table(run_dir: Path) -> list[str]:
    """The run's held-out samples at its start (the reference: the starting model) and at its end, the same questions
    and sampling seed (samples.jsonl), beside each question's answer."""
    with open(ROOT / "lit_rlhf" / "data" / "arithmetic" / "prompts.jsonl") as f:
        answers = {row["prompt"]: row["answer"] for row in map(json.loads, f)}
    with open(run_dir / "samples.jsonl") as f:
        samples = [json.loads(line) for line in f]
    at = {stage: {s["query"]: s["response"] for s in samples if s["stage"] == stage} for stage in ("start", "end")}
    return ["| question | answer | the reference (at the start) | the policy (at the end) |", "|---|---|---|---|",
            *(f"| {question} | {answers[question]} | `{response}` | `{at['end'][question]}` |"
              for question, response in at["start"].items())]


def cell(value: dict) -> str:
    return f"{value['mean']:.1%} [{value['ci_low']:.1%}, {value['ci_high']:.1%}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", default=["rloo:0", "rloo:1", "ppo:0", "grpo:0", "reinforce_pp:0"])
    args = parser.parse_args()
    out = BENCH / "results" / "arithmetic_runs"
    results = [run(spec.split(":")[0], int(spec.split(":")[1]), out) for spec in args.runs]
    lines = ["| run | accuracy before (reference) | accuracy after | pass@4 after | maj@4 after | held-out KL | wall |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        policy, reference = r["task"]["policy"], r["task"]["reference"]
        lines.append(f"| `experiment=arithmetic_{r['algo']} seed={r['seed']}` | {cell(reference['accuracy'])} | "
                     f"{cell(policy['accuracy'])} | {cell(policy['pass@4'])} | {cell(policy['maj@4'])} | "
                     f"{r['kl_after']:.2f} | {r['wall_s']:.0f} s |")
    publish("arithmetic", {"runs": results}, lines, ["docs/tasks.md"])
    rloo = next((r for r in results if r["algo"] == "rloo" and r["seed"] == 0), None)
    if rloo is not None:
        run_dir = ROOT / rloo["run_dir"]
        publish("arithmetic_samples", {"run_dir": rloo["run_dir"]}, samples_table(run_dir), ["docs/tasks.md"])
        shutil.copyfile(run_dir / "curves.png", ROOT / "docs" / "images" / "arithmetic_rloo_curves.png")


if __name__ == "__main__":
    main()
