"""Does ExOPD's reward extrapolation (algo.exopd_lambda > 1) carry a student past a teacher RL-trained from it? On the
calculator task, the student fully fine-tuned (a LoRA student is capped near the teacher by the tool-name token:
bench/tool_name_ceiling.py), distilled from the embedded teacher at lambda 1 (standard distillation), 1.5 and 2, and
GRPO on the same student beside them; Hydra multiruns, as a user types them:

    python train.py -m experiment=calculator_distill model.lora=null algo.exopd_lambda=1,1.5,2 seed=0,1 steps=30 ...
    python train.py -m experiment=calculator_grpo    model.lora=null seed=0,1 steps=30 ...

    python bench/exopd.py                       # ~30 min on 2 CPU cores; the runs stay in logs/bench_exopd/
    python bench/exopd.py --report <that dir>   # the report again from runs already made

Reports the held-out exact match (200 questions, one sample each) every 5 RL steps, mean of the seeds, the first
step at the teacher's level (its accuracy measured as the curves are) per seed, and the final reverse KL to the
teacher. Writes bench/results/exopd.md and .json and the table into docs/distillation.md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from distill_lr import first_at, overrides, run_curve, teacher_as_measured_here
from results_blocks import ROOT, publish

LAMBDAS = ("1", "1.5", "2")
SEEDS = (0, 1)
STEPS, VALIDATE_EVERY, SHOWN = 30, 5, (5, 10, 20, 30)
COMMON = ["model.lora=null", f"steps={STEPS}", f"seed={','.join(map(str, SEEDS))}",
          f"trainer.val_check_interval={VALIDATE_EVERY}", "callbacks.evaluation=null",
          "callbacks.model_checkpoint=null"]


def command(method: str, sweep_dir: Path) -> list[str]:
    extra = [f"algo.exopd_lambda={','.join(LAMBDAS)}"] if method == "distill" else []
    return ["train.py", "-m", f"experiment=calculator_{method}", *COMMON, *extra, f"hydra.sweep.dir={sweep_dir}"]


def sweep(method: str, work: Path) -> None:
    done = subprocess.run([sys.executable, *command(method, work / method)], cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode != 0:
        sys.exit(f"error: the {method} sweep failed (exit code {done.returncode}): {done.stderr.strip()[-800:]}")


def runs_of(method: str, work: Path) -> list[dict]:
    runs = []
    for run_dir in sorted(p for p in (work / method).iterdir() if (p / "csv" / "metrics.csv").exists()):
        chosen = overrides(run_dir)
        curve, reverse_kl = run_curve(run_dir)
        label = f"distillation, lambda {chosen['algo.exopd_lambda']}" if method == "distill" else "GRPO"
        runs.append({"label": label, "seed": int(chosen["seed"]), "curve": curve, "reverse_kl": reverse_kl})
    return runs


def table(runs: list[dict], teacher: float) -> list[str]:
    lines = [f"Calculator task, the student fully fine-tuned, {STEPS} RL steps, seeds "
             f"{' and '.join(map(str, SEEDS))}; held-out exact match (200 questions, 1 sample each), mean of the "
             f"seeds; "
             f"the teacher (LoRA GRPO from the same student) {teacher:.1%} measured the same way "
             f"(`python bench/exopd.py`):", "",
             "| method | " + " | ".join(f"step {s}" for s in SHOWN) + " | first step at the teacher's level (per seed) "
             "| reverse KL at the last step |", "|---|" + "---|" * len(SHOWN) + "---|---|"]
    for label in dict.fromkeys(r["label"] for r in runs):
        group = sorted((r for r in runs if r["label"] == label), key=lambda r: r["seed"])
        shown = [statistics.fmean(r["curve"][s] for r in group if s in r["curve"]) for s in SHOWN]
        firsts = ", ".join(str(first_at(r["curve"], teacher) or f">{STEPS}") for r in group)
        kls = [r["reverse_kl"] for r in group if r["reverse_kl"] is not None]
        lines.append(f"| {label} | " + " | ".join(f"{a:.1%}" for a in shown) + f" | {firsts} | "
                     f"{f'{statistics.fmean(kls):.3f}' if kls else '-'} |")
    distilled = [r for r in runs if r["label"] != "GRPO"]
    grpo = [r for r in runs if r["label"] == "GRPO"]
    lines += ["", f"Every validation from step {SHOWN[0]} on, either seed: distillation at any lambda "
                  f"{validation_range(distilled)}, GRPO {validation_range(grpo)}."]
    return lines


def validation_range(runs: list[dict]) -> str:
    """The lowest and highest validation of the runs from the first step the table shows on."""
    values = [a for r in runs for s, a in r["curve"].items() if s >= SHOWN[0]]
    return f"{min(values):.1%} to {max(values):.1%}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", type=Path, help="a folder this script filled: report its runs, run nothing")
    args = parser.parse_args()
    work = args.report or ROOT / "logs" / "bench_exopd" / time.strftime("%Y-%m-%d_%H-%M-%S")
    if args.report is None:
        for method in ("distill", "grpo"):
            sweep(method, work)
    runs = runs_of("distill", work) + runs_of("grpo", work)
    teacher = teacher_as_measured_here(work)
    data = {"commands": {m: ["python", *command(m, Path("<sweep dir>"))] for m in ("distill", "grpo")},
            "teacher_accuracy_measured_here": teacher,
            "runs": [{**r, "curve": {str(k): v for k, v in r["curve"].items()}} for r in runs]}
    publish("exopd", data, table(runs, teacher), ["docs/distillation.md"])
