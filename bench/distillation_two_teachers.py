"""One student, two teachers: routed on-policy distillation against GRPO on both embedded tasks at once.

    python bench/distillation_two_teachers.py [--resume]    # about 8 min on 2 idle CPU cores

The student is the two-task base (lit_rlhf/assets/tiny-two-task, scripts/build_two_task.py); the prompts are the
bundled two_task set, half calculator questions and half arithmetic ones, each row naming its task in data_source.
Each task's teacher is GRPO's policy on that task alone, a LoRA adapter on the base. Arms, seeds 0 and 1, as a user
types them, validating on the 300 held-out questions every 5 RL steps (eval/exact_match/<task>):

- GRPO on the mixed prompts: `python train.py experiment=two_task_grpo`;
- routed distillation, each prompt scored by its task's teacher: `python train.py experiment=two_task_distill`.

The teachers are evaluated on the same held-out questions with the runs' sampling settings (`python evaluate.py
model=tiny-two-task model.adapter_path=<teacher> ...`, 4 samples per question). The target: the distilled student
reaches 90% of each teacher's accuracy on that teacher's task. Results: bench/results/distillation_two_teachers.md
and .json, docs/images/distillation_two_teachers.png and docs/distillation.md's block.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

import distillation as runs_of_a_task  # bench/distillation.py: one run as a user types it, kept for --resume
from fingerprint import record
from results_blocks import ROOT, fill_results, machine

NAME = "distillation_two_teachers"
SEEDS = (0, 1)
TASKS = ("calculator", "arithmetic")
VALIDATE_EVERY = 5
SHOWN_STEPS = (10, 20, 30, 50, 100, 150)
TARGET_SHARE = 0.9
ARMS = {"grpo": ("GRPO on the mixed prompts", ["experiment=two_task_grpo"]),
        "distill": ("routed distillation (two teachers)", ["experiment=two_task_distill"])}
EVALUATE = ["model=tiny-two-task", "data=two_task", "env=calculator", "reward=arithmetic_correct",
            "task_metrics=exact_match", "algo=grpo", "algo.response_length=24", "algo.temperature=1.0"]
OUT = ROOT / "logs" / "bench_distillation_two_teachers"


def teacher_accuracy(task: str, seed: int) -> dict:
    """The task's teacher on the held-out questions of its task (the split of `seed`), 4 samples per question."""
    run_dir = OUT / f"teacher_{task}_seed{seed}"
    adapter = ROOT / "lit_rlhf" / "assets" / f"tiny-two-task-{task}-teacher"
    wall = runs_of_a_task.call("evaluate.py", *EVALUATE, f"model.adapter_path={adapter}", f"seed={seed}",
                               f"hydra.run.dir={run_dir}", "overwrite_run_dir=true")
    summary = json.loads((run_dir / "evaluation.json").read_text())
    return {"task": task, "seed": seed, "wall_s": wall,
            "accuracy": summary["task_metrics_by_source"][task]["exact_match"]["policy"]["accuracy"]}


def train_rl(name: str, overrides: list[str]) -> dict:
    wall = runs_of_a_task.call("train.py", *overrides, f"trainer.val_check_interval={VALIDATE_EVERY}",
                               f"hydra.run.dir={OUT / name}", "overwrite_run_dir=true")
    return {"name": name, "command": " ".join(overrides), "wall_s": wall}


def rl_result(run: dict) -> dict:
    """Each task's held-out curve [(RL steps done, accuracy, training seconds)] and end-of-run accuracy, from the
    run's metrics.csv (rows in the order logged: a validation's after the RL steps before it) and evaluation."""
    run_dir = OUT / run["name"]
    summary = json.loads((run_dir / "evaluation" / "evaluation.json").read_text())
    curves, steps_done, seconds = {task: [] for task in TASKS}, 0, 0.0
    for r in csv.DictReader((run_dir / "csv" / "metrics.csv").open()):
        if r.get("time/step_s"):
            steps_done, seconds = steps_done + 1, seconds + float(r["time/step_s"])
        elif r.get("eval/exact_match") and not r.get("eval/score_diff"):  # a validation, not the evaluation's row
            for task in TASKS:
                curves[task].append((steps_done, float(r[f"eval/exact_match/{task}"]), seconds))
    by_source = summary["task_metrics_by_source"]
    return {**run, "time_s": seconds, "curves": curves,
            "accuracy": {task: by_source[task]["exact_match"]["policy"]["accuracy"] for task in TASKS},
            "start": {task: by_source[task]["exact_match"]["reference"]["accuracy"]["mean"] for task in TASKS}}


def percent(a: dict) -> str:
    return f"{a['mean']:.1%} [{a['ci_low']:.1%}, {a['ci_high']:.1%}]"


def report(runs: dict[str, list[dict]], teachers: dict[str, list[dict]]) -> tuple[list[str], dict]:
    teacher_mean = {task: statistics.mean(t["accuracy"]["mean"] for t in teachers[task]) for task in TASKS}
    targets = {task: TARGET_SHARE * teacher_mean[task] for task in TASKS}
    lines = ["Each task's teacher on its task's held-out questions (4 samples per question, 95% interval; seed 0's and "
             "seed 1's held-out splits): " + "; ".join(
                 f"{task}: {', '.join(percent(t['accuracy']) for t in teachers[task])} (mean {teacher_mean[task]:.1%}, "
                 f"target {targets[task]:.1%})" for task in TASKS) + ". "
             "The starting student: " + "; ".join(
                 f"{task} {statistics.mean(r['start'][task] for r in runs['grpo']):.1%}" for task in TASKS) + ".", "",
             "| arm | seed | calculator after (4 samples, 95% interval) | arithmetic after | first RL step at 90% of "
             "the calculator teacher | at 90% of the arithmetic teacher | training time |",
             "|---|---|---|---|---|---|---|"]
    summary = {"teacher_accuracy": teacher_mean, "targets": targets, "arms": {}}
    for arm, (label, _) in ARMS.items():
        for r in runs[arm]:
            firsts = [runs_of_a_task.first_reaching(r["curves"][task], targets[task])[0] for task in TASKS]
            shown = [str(f) if f is not None else f"not within {r['curves'][task][-1][0]}"
                     for f, task in zip(firsts, TASKS, strict=True)]
            lines.append(f"| {label} | {r['name'][-1]} | {percent(r['accuracy']['calculator'])} | "
                         f"{percent(r['accuracy']['arithmetic'])} | {shown[0]} | {shown[1]} | {r['time_s']:.0f} s |")
        summary["arms"][arm] = {task: {
            "accuracy_after": statistics.mean(r["accuracy"][task]["mean"] for r in runs[arm]),
            "share_of_teacher": statistics.mean(r["accuracy"][task]["mean"] for r in runs[arm]) / teacher_mean[task]}
            for task in TASKS}
    lines += ["", "Mean of the seeds, end of run, as a share of each task's teacher: " + "; ".join(
        f"{ARMS[arm][0]}: " + ", ".join(f"{task} {s[task]['share_of_teacher']:.0%}" for task in TASKS)
        for arm, s in summary["arms"].items()) + ".", "",
        "Mean of the seeds after N RL steps, held-out exact match per task (1 sample per question):", "",
        "| arm | task | " + " | ".join(f"step {s}" for s in SHOWN_STEPS) + " |",
        "|---|---|" + "---|" * len(SHOWN_STEPS)]
    for arm, (label, _) in ARMS.items():
        for task in TASKS:
            cells = [statistics.mean(dict((c[0], c[1]) for c in r["curves"][task]).get(s, float("nan"))
                                     for r in runs[arm]) for s in SHOWN_STEPS]
            lines.append(f"| {label} | {task} | " + " | ".join(f"{c:.1%}" for c in cells) + " |")
    return lines, summary


def plot(runs: dict[str, list[dict]], summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(TASKS), figsize=(11, 3.8))
    for axis, task in zip(axes, TASKS, strict=True):
        for (arm, (label, _)), colour in zip(ARMS.items(), ("tab:blue", "tab:orange"), strict=True):
            for seed, r in zip(SEEDS, runs[arm], strict=True):
                axis.plot([c[0] for c in r["curves"][task]], [c[1] for c in r["curves"][task]], color=colour,
                          alpha=0.9 if seed == SEEDS[0] else 0.45, label=label if seed == SEEDS[0] else None)
        axis.axhline(summary["teacher_accuracy"][task], color="grey", linestyle="--", linewidth=0.8,
                     label=f"the {task} teacher")
        axis.axhline(summary["targets"][task], color="grey", linestyle=":", linewidth=0.8, label="90% of it")
        axis.set(title=f"{task} questions", xlabel="RL step", ylabel="held-out exact match", ylim=(0, 1))
        axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resume", action="store_true", help="keep the runs an interrupted call finished")
    args = parser.parse_args()
    runs_of_a_task.OUT = OUT  # where its helpers keep and read the runs
    teachers = {task: [runs_of_a_task.cached(f"teacher_{task}_seed{seed}", args.resume,
                                             lambda t=task, s=seed: teacher_accuracy(t, s)) for seed in SEEDS]
                for task in TASKS}
    runs = {arm: [rl_result(runs_of_a_task.cached(
        f"{arm}_seed{seed}", args.resume, lambda n=f"{arm}_seed{seed}", o=[*overrides, f"seed={seed}"]:
        train_rl(n, o))) for seed in SEEDS] for arm, (_, overrides) in ARMS.items()}
    lines, summary = report(runs, teachers)
    results = {**summary, "teachers": teachers, "runs": runs, "machine": machine()}
    (ROOT / "bench" / "results" / f"{NAME}.json").write_text(json.dumps(results, indent=1) + "\n")
    (ROOT / "bench" / "results" / f"{NAME}.md").write_text("\n".join(lines) + "\n")
    plot(runs, summary, ROOT / "docs" / "images" / f"{NAME}.png")
    fill_results(NAME, ["docs/distillation.md"])
    record(NAME)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
