"""Distillation from a stronger teacher against GRPO on the calculator task, both fully fine-tuning the student:

    python bench/strong_teacher.py            # ~25 min on 2 CPU cores once the teacher exists
    python bench/strong_teacher.py --resume   # keeps the runs an interrupted call finished

The teacher is lit_rlhf/assets/tiny-calculator-teacher-large (scripts/build_large_teacher.py: a GPT-NeoX about four
times the student's parameters, pre-trained on the student's corpus with its tokenizer, then GRPO-trained with full
fine-tuning). The student fine-tunes all its weights in both arms (model.lora=null): with LoRA it cannot move the
logit of the tool's name far enough to call the calculator every time (bench/tool_name_ceiling.py), whatever it
learns from.
  (a) GRPO:          python train.py experiment=calculator_grpo model.lora=null seed=<s>            (150 RL steps)
  (b) distillation:  python train.py experiment=calculator_distill_large model.lora=null seed=<s> (--distill-steps)
Seeds 0 and 1; every run validates on the held-out questions every 2 RL steps. Reports the teacher's held-out
accuracy (python evaluate.py, 4 samples per question), each run's end-of-run accuracy with its 95% interval, the first
RL step whose validation reaches GRPO's end-of-run accuracy (the mean of its seeds) and the ratio of (b)'s steps to
(a)'s. Writes bench/results/strong_teacher.{md,json} and the table into docs/distillation.md.
"""

from __future__ import annotations

import argparse
import json
import statistics

import distillation as D
from fingerprint import record
from results_blocks import fill_results, machine

TEACHER = D.ROOT / "lit_rlhf" / "assets" / "tiny-calculator-teacher-large"
GRPO_STEPS = 150


def teacher_accuracy(resume: bool) -> dict:
    def run() -> dict:
        wall = D.call("evaluate.py", f"policy_path={TEACHER}", "model=tiny-calculator",
                      *D.TASKS["calculator"]["evaluate"], "seed=0", f"hydra.run.dir={D.OUT / 'teacher_eval'}",
                      "overwrite_run_dir=true")
        summary = json.loads((D.OUT / "teacher_eval" / "evaluation.json").read_text())
        return {"accuracy": summary["task_metrics"]["exact_match"]["policy"]["accuracy"], "wall_s": wall}
    return D.cached("teacher_eval_result", resume, run)


def table(teacher: dict, target: float, runs: dict[str, list[dict]]) -> list[str]:
    cell = lambda a: f"{a['mean']:.1%} [{a['ci_low']:.1%}, {a['ci_high']:.1%}]"  # noqa: E731
    lines = [f"Teacher (lit_rlhf/assets/tiny-calculator-teacher-large): {cell(teacher['accuracy'])} held-out exact "
             f"match. Target: GRPO's end-of-run accuracy ({GRPO_STEPS} RL steps, mean of its seeds), {target:.1%}, at "
             f"a validation (1 sample per question, every 2 RL steps). The student fine-tunes all its weights in "
             f"both arms.", "",
             "| arm | seed | RL steps | end-of-run accuracy [95% CI] | first RL step at the target | training s |",
             "|---|---:|---:|---|---:|---:|"]
    for arm, label in (("grpo", "(a) GRPO"), ("distill", "(b) distillation from the larger teacher")):
        for seed, r in zip(D.SEEDS, runs[arm], strict=True):
            step = "not reached" if r["steps_to_target"] is None else str(r["steps_to_target"])
            lines.append(f"| {label} | {seed} | {r['curve'][-1][0]} | {cell(r['accuracy'])} | {step} | "
                         f"{r['time_s']:.0f} |")
    reached = {arm: [r["steps_to_target"] for r in runs[arm]] for arm in runs}
    if all(step is not None for steps in reached.values() for step in steps):
        ratio = statistics.mean(reached["distill"]) / statistics.mean(reached["grpo"])
        lines += ["", f"Distillation reached GRPO's end-of-run accuracy in {ratio:.2f}x GRPO's RL steps to it "
                      f"(means of the seeds: {statistics.mean(reached['distill']):.1f} against "
                      f"{statistics.mean(reached['grpo']):.1f})."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resume", action="store_true", help="keep the runs an interrupted call finished")
    parser.add_argument("--distill-steps", type=int, default=60)
    args = parser.parse_args()
    if not (TEACHER / "config.json").is_file():
        raise SystemExit(f"error: no teacher at {TEACHER.relative_to(D.ROOT)}; build it with "
                         f"python scripts/build_large_teacher.py (about 45 minutes on 2 CPU cores).")
    D.TASK, D.OUT = "calculator", D.ROOT / "logs" / "bench_strong_teacher"
    teacher = teacher_accuracy(args.resume)
    runs: dict[str, list[dict]] = {"grpo": [], "distill": []}
    for seed in D.SEEDS:
        arms = {"grpo": ["experiment=calculator_grpo", "model.lora=null", f"seed={seed}", f"steps={GRPO_STEPS}"],
                "distill": ["experiment=calculator_distill_large", "model.lora=null", f"seed={seed}",
                            f"steps={args.distill_steps}"]}
        for arm, overrides in arms.items():
            name = f"{arm}_seed{seed}"
            runs[arm].append(D.rl_result(D.cached(name, args.resume, lambda n=name, o=overrides: D.train_rl(n, o))))
    target = statistics.mean(r["accuracy"]["mean"] for r in runs["grpo"])
    for arm_runs in runs.values():
        for r in arm_runs:
            r["steps_to_target"], r["seconds_to_target"] = D.first_reaching(r["curve"], target)
    lines = table(teacher, target, runs)
    name = "strong_teacher"
    results = {"teacher": teacher, "target": target, "runs": runs, "machine": machine()}
    (D.BENCH / "results" / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    (D.BENCH / "results" / f"{name}.md").write_text("\n".join(lines) + "\n")
    fill_results(name, ["docs/distillation.md"])
    record(name)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
