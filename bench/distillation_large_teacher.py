"""On-policy distillation from a teacher far above the student's own RL, against GRPO on the same student. The
calculator task; the student tiny-calculator fully fine-tuned (a LoRA student cannot move its tool-name token:
bench/tool_name_ceiling.py); the teacher the embedded tiny-calculator-teacher-large (3.32M parameters; its held-out
exact match in bench/results/calculator_large_teacher.md). Each arm as a user types it, seeds 0 to 3, 150 RL steps:

  (a) GRPO:                          python train.py experiment=calculator_grpo model.lora=null     (its lr, 1e-3)
  (a') GRPO at distillation's lr:    ... algo.optimizer.lr=3e-4
  (b) on-policy distillation:        python train.py experiment=calculator_distill_large           (sampled token)
  (b') full-vocabulary reverse KL:   ... algo.divergence=generalized_jsd algo.beta=1
  (c) SFT on the teacher's samples:  as many model tokens as (b)'s teacher scored, one epoch of python train_sft.py
                                     model=tiny-calculator model.lora=null, then python evaluate.py
  (d) distillation + task reward:    (b) with algo.task_reward_coef=1

    python bench/distillation_large_teacher.py            # ~45 min on 2 idle CPU cores; runs kept in
                                                          # logs/bench_distillation_large/
    python bench/distillation_large_teacher.py --resume   # keeps the runs an interrupted call finished

Every RL run validates on the 200 held-out questions (1 sample each) every 5 RL steps. Reports per run the end-of-run
accuracy (4 samples per question, 95% bootstrap interval) and, against three targets, the first validation reaching
it: GRPO's own 150-step accuracy at each of its two learning rates (arm (a)'s and (a')'s end-of-run mean over the
seeds) and 90% of the teacher's. Writes
bench/results/distillation_large_teacher.{md,json}, docs/images/distillation_large_teacher.png and the tables into
docs/distillation.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import distillation as runs_of_a_task  # bench/distillation.py: one run as a user types it, read back
from fingerprint import record
from results_blocks import ROOT, fill_results, machine

NAME = "distillation_large_teacher"
SEEDS = (0, 1, 2, 3)  # four: the sampled-token and full-vocabulary losses end a few points apart
VALIDATE_EVERY = 5
SHOWN_STEPS = (10, 20, 30, 50, 100, 150)
DISTILL = ["experiment=calculator_distill_large"]
GRPO = ["experiment=calculator_grpo", "model.lora=null"]
RL_ARMS = {"grpo": ("(a) GRPO, lr 1e-3", GRPO),
           "grpo_lr3e-4": ("(a') GRPO, lr 3e-4", [*GRPO, "algo.optimizer.lr=3e-4"]),
           "distill": ("(b) on-policy distillation (sampled token)", DISTILL),
           "distill_full_vocab": ("(b') distillation, full-vocabulary reverse KL",
                                  [*DISTILL, "algo.divergence=generalized_jsd", "algo.beta=1"]),
           "distill_task_reward": ("(d) distillation + task reward (coef 1)", [*DISTILL, "algo.task_reward_coef=1"])}
SFT_LABEL = "(c) SFT on the teacher's samples"
TEACHER = ROOT / "lit_rlhf" / "assets" / "tiny-calculator-teacher-large"
OUT = ROOT / "logs" / "bench_distillation_large"


def train_rl(name: str, overrides: list[str]) -> dict:
    wall = runs_of_a_task.call("train.py", *overrides, f"trainer.val_check_interval={VALIDATE_EVERY}",
                               f"hydra.run.dir={OUT / name}", "overwrite_run_dir=true")
    return {"name": name, "command": " ".join(overrides), "wall_s": wall}


def train_sft(name: str, rows_path: Path, sampled: dict, seed: int) -> dict:
    """`python train_sft.py` (full fine-tuning, as the RL arms) on the teacher's rows, then `python evaluate.py`."""
    run_dir, model = OUT / name, ["model=tiny-calculator", "model.lora=null"]
    training = runs_of_a_task.call("train_sft.py", *model, f"data.dataset={rows_path}", f"seed={seed}",
                                   f"hydra.run.dir={run_dir}", "overwrite_run_dir=true")
    runs_of_a_task.call("evaluate.py", f"policy_path={run_dir / 'policy'}", *model,
                        *runs_of_a_task.TASKS["calculator"]["evaluate"], f"seed={seed}",
                        f"hydra.run.dir={run_dir / 'evaluate'}", "overwrite_run_dir=true")
    summary = json.loads((run_dir / "evaluate" / "evaluation.json").read_text())
    return {"name": name, "command": f"train_sft.py {' '.join(model)} data.dataset=<teacher rows> seed={seed}",
            "time_s": sampled["sampling_s"] + training, "curve": [], "teacher_tokens": sampled["model_tokens"],
            "accuracy": summary["task_metrics"]["exact_match"]["policy"]["accuracy"]}


def seed_list() -> str:
    return ", ".join(map(str, SEEDS[:-1])) + f" and {SEEDS[-1]}"


def reached(run: dict, target: float) -> str:
    step, seconds = runs_of_a_task.first_reaching(run["curve"], target)
    return f"{step} ({seconds:.0f} s)" if step is not None else f"not within {run['curve'][-1][0]}"


def mean_first_step(runs: list[dict], target: float) -> float | None:
    steps = [runs_of_a_task.first_reaching(r["curve"], target)[0] for r in runs]
    return None if None in steps else statistics.mean(steps)


def end_of_run(runs: list[dict]) -> str:
    """The seeds' mean accuracy after the run and, for an RL arm, its mean training time per RL step."""
    accuracy = statistics.mean(r["accuracy"]["mean"] for r in runs)
    if not runs[0]["curve"]:  # SFT
        return f"{accuracy:.1%}"
    return f"{accuracy:.1%} ({statistics.mean(r['time_s'] / r['curve'][-1][0] for r in runs):.2f} s per RL step)"


def report(runs: dict[str, list[dict]], teacher: float, sampled: dict) -> tuple[list[str], dict]:
    cell = lambda a: f"{a['mean']:.1%} [{a['ci_low']:.1%}, {a['ci_high']:.1%}]"  # noqa: E731
    ends = {arm: statistics.mean(r["accuracy"]["mean"] for r in runs[arm]) for arm in ("grpo", "grpo_lr3e-4")}
    targets = {"(a)'s 150-step accuracy": ends["grpo"], "(a')'s 150-step accuracy": ends["grpo_lr3e-4"],
               "90% of the teacher": 0.9 * teacher}
    lines = [f"Calculator task, the student (tiny-calculator, 0.88M parameters) fully fine-tuned; the teacher "
             f"tiny-calculator-teacher-large, {teacher:.1%} held-out exact match; seeds {seed_list()}, 150 RL steps, "
             f"validation (200 held-out questions, 1 sample each) every {VALIDATE_EVERY} steps; targets: GRPO's "
             f"150-step accuracy (the end-of-run mean of the seeds) at lr 1e-3 ({ends['grpo']:.1%}) and at lr 3e-4 "
             f"({ends['grpo_lr3e-4']:.1%}), and 90% of the teacher ({0.9 * teacher:.1%}); each cell the first RL "
             f"step whose validation reaches it, with the training time to it (`python bench/{NAME}.py`):", "",
             "| arm | seed | accuracy after (4 samples, 95% interval) | first step at (a)'s 150-step accuracy "
             "| at (a')'s | at 90% of the teacher | teacher tokens | training time |",
             "|---|---|---|---|---|---|---|---|"]
    for arm, (label, _) in [*RL_ARMS.items(), ("sft", (SFT_LABEL, None))]:
        for seed, r in zip(SEEDS, runs[arm], strict=True):
            firsts = [reached(r, t) if r["curve"] else "-" for t in targets.values()]
            tokens = f"{r['teacher_tokens']:,.0f}" if r.get("teacher_tokens") else "-"
            lines.append(f"| {label} | {seed} | {cell(r['accuracy'])} | {' | '.join(firsts)} | {tokens} | "
                         f"{r['time_s']:.0f} s |")
    summary = {}
    for name, target in targets.items():
        steps = {arm: mean_first_step(runs[arm], target) for arm in RL_ARMS}
        summary[name] = {"target": target, "mean_first_step": steps}
        shown = "; ".join(f"{RL_ARMS[arm][0]}: {'>150' if s is None else f'{s:g}'}" for arm, s in steps.items())
        lines += ["", f"RL steps to {name} ({target:.1%}), mean of the seeds' first validation there: {shown}."]
    after = "; ".join(f"{label}: {end_of_run(runs[arm])}" for arm, (label, _) in
                      [*RL_ARMS.items(), ("sft", (SFT_LABEL, None))])
    lines += ["", f"Accuracy after the run, mean of the seeds (and the training time per RL step): {after}."]
    lines += ["", "Mean of the seeds' validations after N RL steps, and for the distillation arms the reverse KL to "
                  "the teacher on each step's own rollout (nats per token), averaged over the RL steps since the "
                  "previous column (one step's batch alone swings by 2-3x):", "",
              "| arm | " + " | ".join(f"step {s}" for s in SHOWN_STEPS) + " |", "|---|" + "---|" * len(SHOWN_STEPS)]
    for arm, (label, _) in RL_ARMS.items():
        at = [{step: accuracy for step, accuracy, _ in r["curve"]} for r in runs[arm]]
        lines.append(f"| {label} | " + " | ".join(f"{statistics.mean(a[s] for a in at):.1%}" for s in SHOWN_STEPS)
                     + " |")
    windows = list(zip((0, *SHOWN_STEPS[:-1]), SHOWN_STEPS, strict=True))  # (after, up to and including)
    for arm in ("distill", "distill_full_vocab", "distill_task_reward"):
        kl = [statistics.mean(r["reverse_kl"][str(step)] for r in runs[arm] for step in range(after + 1, last + 1))
              for after, last in windows]
        lines.append(f"| {RL_ARMS[arm][0]}: distill/reverse_kl | " + " | ".join(f"{v:.3f}" for v in kl) + " |")
    lines += ["", f"(c) trained on {sampled['rows']:,} teacher episodes ({sampled['model_tokens']:,} model tokens, "
                  f"sampled in {sampled['sampling_s']:.0f} s). Training time: the RL steps' time/step_s (validations "
                  "left out); SFT's sampling and train_sft.py."]
    return lines, summary


def plot(runs: dict[str, list[dict]], targets: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(11, 3.8))
    for (arm, (label, _)), colour in zip(RL_ARMS.items(), ("tab:blue", "tab:cyan", "tab:orange", "tab:purple",
                                                           "tab:green"), strict=True):
        for seed, r in zip(SEEDS, runs[arm], strict=True):
            style = {"color": colour, "alpha": 0.9 if seed == SEEDS[0] else 0.45,
                     "label": label if seed == SEEDS[0] else None}
            by_step.plot([c[0] for c in r["curve"]], [c[1] for c in r["curve"]], **style)
            by_time.plot([c[2] / 60 for c in r["curve"]], [c[1] for c in r["curve"]], **style)
    for seed, r in zip(SEEDS, runs["sft"], strict=True):
        by_step.axhline(r["accuracy"]["mean"], color="tab:red", linestyle=":", label=SFT_LABEL if seed == 0 else None)
        by_time.plot([r["time_s"] / 60], [r["accuracy"]["mean"]], "s", color="tab:red")
    for axis in (by_step, by_time):
        for (name, target), style in zip(targets.items(), ("--", "-.", ":"), strict=True):
            axis.axhline(target, color="grey", linestyle=style, linewidth=0.8, label=name)
        axis.set(ylabel="held-out exact match", ylim=(0, 1))
    by_step.set(xlabel="RL step")
    by_time.set(xlabel="minutes of training steps (SFT: sampling + training)")
    by_step.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resume", action="store_true", help="keep the runs an interrupted call finished")
    args = parser.parse_args()
    runs_of_a_task.OUT = OUT  # where its helpers keep and read the runs
    teacher = json.loads((ROOT / "bench" / "results" / "calculator_large_teacher.json").read_text())
    teacher_accuracy = teacher["exact_match"]["policy"]["accuracy"]["mean"]
    runs: dict[str, list[dict]] = {}
    for arm, (_, overrides) in RL_ARMS.items():
        runs[arm] = [runs_of_a_task.rl_result(runs_of_a_task.cached(
            f"{arm}_seed{seed}", args.resume, lambda n=f"{arm}_seed{seed}", o=[*overrides, f"seed={seed}"]:
            train_rl(n, o))) for seed in SEEDS]
    budget = statistics.mean(r["teacher_tokens"] for r in runs["distill"])
    rows_path = OUT / "teacher_rows.jsonl"
    sampled = runs_of_a_task.cached("teacher_rows", args.resume,
                                    lambda: runs_of_a_task.teacher_rows(TEACHER, budget, rows_path))
    runs["sft"] = [runs_of_a_task.cached(f"sft_seed{seed}", args.resume,
                                         lambda s=seed: train_sft(f"sft_seed{s}", rows_path, sampled, s))
                   for seed in SEEDS]
    for arm in RL_ARMS:  # JSON keys: the reverse KL by RL step, as it is read back from a kept run
        for r in runs[arm]:
            r["reverse_kl"] = {str(step): kl for step, kl in r["reverse_kl"].items()}
    lines, summary = report(runs, teacher_accuracy, sampled)
    results = {"teacher_accuracy": teacher_accuracy, "targets": summary, "runs": runs, "teacher_samples": sampled,
               "machine": machine()}
    (ROOT / "bench" / "results" / f"{NAME}.json").write_text(json.dumps(results, indent=1) + "\n")
    (ROOT / "bench" / "results" / f"{NAME}.md").write_text("\n".join(lines) + "\n")
    plot(runs, {name: s["target"] for name, s in summary.items()}, ROOT / "docs" / "images" / f"{NAME}.png")
    fill_results(NAME, ["docs/distillation.md"])
    record(NAME)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
