"""Does the learning rate explain why distillation trails GRPO on the calculator task? A Hydra multirun per method, as
a user types it, over the same three learning rates and two seeds, 30 RL steps each, validated every 2 steps:

    python train.py -m experiment=calculator_grpo    steps=30 seed=0,1 algo.optimizer.lr=1e-3,3e-3,1e-2 ...
    python train.py -m experiment=calculator_distill steps=30 seed=0,1 algo.optimizer.lr=1e-3,3e-3,1e-2 ...

    python bench/distill_lr.py                       # ~7 min on 2 idle cores; the runs stay in logs/bench_distill_lr/
    python bench/distill_lr.py --report <that dir>   # the report again from runs already made

The teacher is the experiment's embedded one (lit_rlhf/assets/tiny-calculator-teacher); the target is 90% of its
held-out exact match (its model card's end-of-run figure). Reports per method and learning rate: the held-out exact
match at RL steps 10, 20 and 30 (mean of the seeds), the first RL step at the target (each seed), and for
distillation the reverse KL of the last step. Writes bench/results/distill_lr.md and .json and the table into
docs/distillation.md.
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from results_blocks import ROOT, publish

LRS = ("1e-3", "3e-3", "1e-2")  # 1x, 3x, 10x the embedded tasks' default (the anchors distill at 1-10x their RL rate)
SEEDS = (0, 1)
STEPS, VALIDATE_EVERY, SHOWN = 30, 2, (10, 20, 30)
TEACHER = ROOT / "lit_rlhf" / "assets" / "tiny-calculator-teacher"
TEACHER_CARD = TEACHER / "README.md"
TARGET_SHARE = 0.9


def teacher_accuracy() -> float:
    found = re.search(r"\| eval/exact_match \| ([0-9.]+) \|", TEACHER_CARD.read_text())
    if found is None:
        sys.exit(f"error: {TEACHER_CARD} has no eval/exact_match; rebuild it: python scripts/build_teacher.py")
    return float(found.group(1))


def command(method: str, sweep_dir: Path) -> list[str]:
    return ["train.py", "-m", f"experiment=calculator_{method}", f"steps={STEPS}",
            f"seed={','.join(map(str, SEEDS))}", f"algo.optimizer.lr={','.join(LRS)}",
            f"trainer.val_check_interval={VALIDATE_EVERY}", "callbacks.evaluation=null",
            "callbacks.model_checkpoint=null", f"hydra.sweep.dir={sweep_dir}"]


def teacher_as_measured_here(work: Path) -> float:
    """The teacher's held-out exact match measured as the curves are (one sample per question, the validation at step
    0 of a run that starts from it); run once into work/teacher."""
    run_dir = work / "teacher"
    if not (run_dir / "csv" / "metrics.csv").exists():
        done = subprocess.run([sys.executable, "train.py", "experiment=calculator_grpo",
                               f"model.name_or_path={TEACHER}", "steps=1", "seed=0", "trainer.val_check_interval=1",
                               "callbacks.evaluation=null", "callbacks.model_checkpoint=null",
                               f"hydra.run.dir={run_dir}"], cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"error: the teacher's run failed (exit code {done.returncode}): {done.stderr.strip()[-800:]}")
    curve, _ = run_curve(run_dir)
    return curve[0]


def run_curve(run_dir: Path) -> tuple[dict[int, float], float | None]:
    """{RL steps done: held-out exact match} from a run's metrics.csv, and the reverse KL of its last step."""
    curve, steps_done, reverse_kl = {}, 0, None
    for row in csv.DictReader((run_dir / "csv" / "metrics.csv").open()):
        if row.get("time/step_s"):
            steps_done += 1
            reverse_kl = float(row["distill/reverse_kl"]) if row.get("distill/reverse_kl") else reverse_kl
        elif row.get("eval/exact_match"):
            curve[steps_done] = float(row["eval/exact_match"])
    return curve, reverse_kl


def overrides(run_dir: Path) -> dict[str, str]:
    lines = (run_dir / ".hydra" / "overrides.yaml").read_text().splitlines()
    return dict(line.removeprefix("- ").split("=", 1) for line in lines if "=" in line)


def sweep(method: str, work: Path) -> None:
    done = subprocess.run([sys.executable, *command(method, work / method)], cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode != 0:
        sys.exit(f"error: the {method} sweep failed (exit code {done.returncode}): {done.stderr.strip()[-800:]}")


def sweep_runs(method: str, work: Path) -> list[dict]:
    sweep_dir = work / method
    runs = []
    for run_dir in sorted(p for p in sweep_dir.iterdir() if (p / "csv" / "metrics.csv").exists()):
        chosen = overrides(run_dir)
        curve, reverse_kl = run_curve(run_dir)
        runs.append({"method": method, "lr": float(chosen["algo.optimizer.lr"]), "seed": int(chosen["seed"]),
                     "curve": curve, "reverse_kl": reverse_kl})
    return runs


def first_at(curve: dict[int, float], target: float) -> int | None:
    return next((step for step, accuracy in sorted(curve.items()) if accuracy >= target), None)


def table(runs: list[dict], teacher: float, teacher_here: float) -> list[str]:
    target = TARGET_SHARE * teacher
    lines = [f"Calculator task, 30 RL steps, seeds {' and '.join(map(str, SEEDS))}, held-out exact match (200 "
             f"questions, 1 sample each) every {VALIDATE_EVERY} steps; teacher {teacher:.1%} (its model card; "
             f"{teacher_here:.1%} measured as these curves are, at step 0 of a run from it), target "
             f"{TARGET_SHARE:.0%} of the card's = {target:.1%} (`python bench/distill_lr.py`):", "",
             "| method | lr | " + " | ".join(f"step {s}" for s in SHOWN) + " | first step at the target (per seed) | "
             "reverse KL at step 30 |", "|---|---|" + "---|" * len(SHOWN) + "---|---|"]
    for method in ("grpo", "distill"):
        for lr in LRS:
            group = [r for r in runs if r["method"] == method and r["lr"] == float(lr)]  # Hydra writes 0.001
            shown = [statistics.fmean(r["curve"][s] for r in group if s in r["curve"]) for s in SHOWN]
            by_seed = sorted(group, key=lambda r: r["seed"])
            firsts = ", ".join(str(first_at(r["curve"], target) or f">{STEPS}") for r in by_seed)
            kls = [r["reverse_kl"] for r in group if r["reverse_kl"] is not None]
            kl = f"{statistics.fmean(kls):.3f}" if kls else "-"
            lines.append(f"| {'GRPO' if method == 'grpo' else 'distillation'} | {lr} | "
                         + " | ".join(f"{a:.1%}" for a in shown) + f" | {firsts} | {kl} |")
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", type=Path, help="a folder this script filled: report its runs, run nothing")
    args = parser.parse_args()
    teacher = teacher_accuracy()
    work = args.report or ROOT / "logs" / "bench_distill_lr" / time.strftime("%Y-%m-%d_%H-%M-%S")
    if args.report is None:
        for method in ("grpo", "distill"):
            sweep(method, work)
    runs = [run for method in ("grpo", "distill") for run in sweep_runs(method, work)]
    teacher_here = teacher_as_measured_here(work)
    data = {"commands": {m: ["python", *command(m, Path("<sweep dir>"))] for m in ("grpo", "distill")},
            "teacher_accuracy": teacher, "teacher_accuracy_measured_here": teacher_here,
            "runs": [{**r, "curve": {str(k): v for k, v in r["curve"].items()}} for r in runs]}
    publish("distill_lr", data, table(runs, teacher, teacher_here), ["docs/distillation.md"])
