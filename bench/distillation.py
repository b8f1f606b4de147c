"""On-policy distillation against RL and SFT on an embedded task, each run as a user runs it:

    python bench/distillation.py                     # the calculator task: the teacher, then seeds 0 and 1 of every
                                                     # arm; ~45 min on 2 CPU cores
    python bench/distillation.py --task arithmetic   # the arithmetic task, ~30 min
    python bench/distillation.py --resume            # keeps the runs an interrupted call finished

The teacher is the policy `python train.py experiment=<task>_grpo seed=0 export_dir=<folder>` trains (that run is
also arm (a)'s seed 0). From the task's base model, with the same prompts, budget and held-out questions:
  (a) GRPO:                        python train.py experiment=<task>_grpo seed=<s>
  (b) on-policy distillation:      python train.py experiment=<task>_distill teacher.name_or_path=<teacher> seed=<s>
  (c) SFT on the teacher's samples: the teacher samples the training questions (K samples each, as in RL) until its
      model tokens equal what (b)'s teacher scored (mean of the seeds' distill/teacher_tokens); python train_sft.py
      model=<the task's model> data.dataset=<those rows> seed=<s> trains on them, each row the episode's token ids
      as sampled (input_ids, with completion_mask 1 on the model's tokens: the question and the calculator's
      results are context, as in RL), and python evaluate.py evaluates the result
  (d) distillation + task reward:  (b) with algo.task_reward_coef=1
Every RL run validates on the held-out questions (eval/exact_match, 1 sample each) every few RL steps. Reports per
run the end-of-run accuracy (4 samples per question, 95% bootstrap interval), the first RL step whose validation
reaches 90% of the teacher's accuracy, and the training time (an RL run's: the sum of its steps' time/step_s, which
leaves validations out; SFT's: the teacher's sampling and train_sft.py); the ratio of (b)'s steps to (a)'s. Writes
bench/results/distillation_<task>.md and .json, the curves against RL steps and wall time
(docs/images/distillation_<task>.png), and the table into docs/distillation.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from fingerprint import record
from results_blocks import fill_results, machine

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
TARGET_SHARE = 0.9  # of the teacher's accuracy
SEEDS = (0, 1)
# per task: its model, how often the RL runs validate (often enough to tell a fifth of GRPO's steps to the target:
# GRPO's calculator run validated every 10 steps was at 46% at step 9 and past 90% of its end at step 19), and
# evaluate.py's settings for what its experiments sample
TASKS = {
    "calculator": {"model": "tiny-calculator", "validate_every": 2, "shown_steps": (4, 8, 12, 16, 20, 30, 50, 150),
                   "evaluate": ["data=calculator", "env=calculator", "reward=arithmetic_correct",
                                "task_metrics=exact_match", "algo=grpo", "algo.response_length=24",
                                "algo.temperature=1.0"]},
    "arithmetic": {"model": "tiny-arithmetic", "validate_every": 5, "shown_steps": (25, 50, 100, 150, 200, 300, 400),
                   "evaluate": ["data=arithmetic", "reward=arithmetic", "task_metrics=exact_match", "algo=grpo",
                                "algo.response_length=10", "algo.temperature=0.7"]},
}
TASK = "calculator"  # set by main()
OUT = ROOT / "logs" / "bench_distillation" / TASK


def cached(name: str, resume: bool, run) -> dict:
    """A run's result: kept in its directory, so that --resume skips what an interrupted call finished."""
    path = OUT / name / "result.json"
    if resume and path.is_file():
        return json.loads(path.read_text())
    result = run()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(name, {k: v for k, v in result.items() if isinstance(v, (int, float))}, flush=True)
    return result


def call(script: str, *args: str) -> float:
    """`python <script> args...` from the repository's root; its wall time."""
    start = time.time()
    done = subprocess.run([sys.executable, script, *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"python {script} {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return time.time() - start


def train_rl(name: str, overrides: list[str]) -> dict:
    """One `python train.py` run, validating every few RL steps; what it measured is read by rl_result."""
    wall = call("train.py", *overrides, f"trainer.val_check_interval={TASKS[TASK]['validate_every']}",
                f"hydra.run.dir={OUT / name}", "overwrite_run_dir=true")
    return {"name": name, "command": " ".join(overrides), "wall_s": wall}


def rl_result(run: dict) -> dict:
    """A train.py run's held-out curve, end-of-run evaluation and teacher tokens, from its run directory.

    metrics.csv holds its rows in the order they were logged: a validation's row comes after the rows of the RL steps
    before it (the first, at step 0, is the starting policy's), so the curve's x is the number of RL steps done."""
    run_dir = OUT / run["name"]
    summary = json.loads((run_dir / "evaluation" / "evaluation.json").read_text())
    rows = list(csv.DictReader((run_dir / "csv" / "metrics.csv").open()))
    curve, steps_done, seconds = [], 0, 0.0  # (RL steps done, held-out accuracy, seconds of those steps)
    reverse_kl = {}  # {RL step: distill/reverse_kl of its rollout}
    for r in rows:
        if r.get("time/step_s"):  # an RL step's row; its time leaves validations out
            steps_done, seconds = steps_done + 1, seconds + float(r["time/step_s"])
            if r.get("distill/reverse_kl"):
                reverse_kl[steps_done] = float(r["distill/reverse_kl"])
        elif r.get("eval/exact_match") and not r.get("eval/score_diff"):  # a validation, not the evaluation's row
            curve.append((steps_done, float(r["eval/exact_match"]), seconds))
    tokens = sum(float(r["distill/teacher_tokens"]) for r in rows if r.get("distill/teacher_tokens"))
    return {**run, "time_s": seconds, "accuracy": summary["task_metrics"]["exact_match"]["policy"]["accuracy"],
            "curve": curve, "reverse_kl": reverse_kl, "teacher_tokens": tokens or None}


def teacher_rows(teacher_dir: Path, token_budget: float, path: Path) -> dict:
    """The teacher's samples of the training questions (K per question, the RL runs' sampling settings) until its
    model tokens reach token_budget, as token-id rows: the prompt and the episode as sampled, completion_mask 1 on the
    model's tokens (its turns' stop tokens included), 0 on the prompt and the environment's tokens; the texts beside
    them for a reader."""
    import lightning as L
    import torch
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from lit_rlhf.cli.resolvers import register_resolvers

    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=[f"experiment={TASK}_grpo", f"model.name_or_path={teacher_dir}",
                                          f"paths.output_dir={OUT / 'teacher_samples'}"])
    L.seed_everything(0)
    datamodule, module = instantiate(cfg.data), instantiate(cfg.algo, _convert_="all")
    datamodule.setup("fit")
    module.configure_model()
    module.policy.eval()
    start, rows, tokens = time.time(), [], 0
    with torch.no_grad():
        while tokens < token_budget:
            for batch in datamodule.train_dataloader():
                drawn = module.sampler.draw(batch, module.samples_per_prompt, version=0)
                samples = drawn.samples
                texts = (["".join(text for _, text in turns) for turns in drawn.conversations] or drawn.completions)
                for i, (prompt, text) in enumerate(zip(drawn.prompts, texts, strict=True)):
                    query = samples.queries[i][samples.query_mask[i].bool()].tolist()
                    episode = samples.forward_mask[i].bool()  # the model's turns and the observations between them
                    model_tokens = samples.response_mask[i][episode].long().tolist()
                    rows.append({"input_ids": query + samples.responses[i][episode].tolist(),
                                 "completion_mask": [0] * len(query) + model_tokens,
                                 "prompt": prompt, "completion": text})
                    tokens += sum(model_tokens)
                if tokens >= token_budget:
                    break
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return {"rows": len(rows), "model_tokens": tokens, "sampling_s": time.time() - start}


def train_sft(name: str, rows_path: Path, sampled: dict, seed: int) -> dict:
    """`python train_sft.py` on the teacher's rows, then `python evaluate.py` of the saved policy."""
    run_dir = OUT / name
    model = f"model={TASKS[TASK]['model']}"
    training = call("train_sft.py", model, f"data.dataset={rows_path}", f"seed={seed}", f"hydra.run.dir={run_dir}",
                    "overwrite_run_dir=true")
    evaluating = call("evaluate.py", f"policy_path={run_dir / 'policy'}", model, *TASKS[TASK]["evaluate"],
                      f"seed={seed}", f"hydra.run.dir={run_dir / 'evaluate'}", "overwrite_run_dir=true")
    summary = json.loads((run_dir / "evaluate" / "evaluation.json").read_text())
    return {"name": name, "command": f"train_sft.py {model} data.dataset=<teacher rows> seed={seed}",
            "time_s": sampled["sampling_s"] + training, "training_s": training, "evaluation_s": evaluating,
            "accuracy": summary["task_metrics"]["exact_match"]["policy"]["accuracy"], "curve": [],
            "teacher_tokens": sampled["model_tokens"]}


def first_reaching(curve: list, target: float) -> tuple[int, float] | tuple[None, None]:
    """The first validation at or above target: its RL step and the training seconds until then."""
    return next(((step, seconds) for step, accuracy, seconds in curve if accuracy >= target), (None, None))


ARMS = {"grpo": "(a) GRPO", "distill": "(b) on-policy distillation", "sft": "(c) SFT on the teacher's samples",
        "distill_task_reward": "(d) distillation + task reward (coef 1)"}


def table(teacher: dict, target: float, runs: dict[str, list[dict]]) -> list[str]:
    cell = lambda a: f"{a['mean']:.1%} [{a['ci_low']:.1%}, {a['ci_high']:.1%}]"  # noqa: E731
    lines = [f"Teacher (`experiment={TASK}_grpo seed=0`): {cell(teacher['accuracy'])} held-out exact match; "
             f"target: 90% of it, {target:.1%}, at a validation (1 sample per question, every "
             f"{TASKS[TASK]['validate_every']} RL steps).", "",
             "| arm | seed | accuracy after (4 samples, 95% interval) | first RL step at the target (training time "
             "to it) | teacher tokens | training time |", "|---|---|---|---|---|---|"]
    for arm, label in ARMS.items():
        for seed, r in zip(SEEDS, runs[arm], strict=True):
            reached = "-" if not r["curve"] else (f"{r['steps_to_target']} ({r['seconds_to_target']:.0f} s)"
                                                   if r["steps_to_target"] is not None
                                                   else f"not within {r['curve'][-1][0]}")
            tokens = f"{r['teacher_tokens']:,.0f}" if r.get("teacher_tokens") else "-"
            lines.append(f"| {label} | {seed} | {cell(r['accuracy'])} | {reached} | {tokens} | {r['time_s']:.0f} s |")
    steps = {arm: [r["steps_to_target"] for r in runs[arm]] for arm in ("grpo", "distill")}
    if all(s is not None for s in steps["grpo"] + steps["distill"]):
        ratio = statistics.mean(steps["distill"]) / statistics.mean(steps["grpo"])
        seconds = {arm: statistics.mean(r["seconds_to_target"] for r in runs[arm]) for arm in ("grpo", "distill")}
        lines += ["", f"RL steps to the target, mean of the seeds: distillation {statistics.mean(steps['distill']):g}, "
                      f"GRPO {statistics.mean(steps['grpo']):g}: **{ratio:.2f}x** GRPO's; training time to it: "
                      f"{seconds['distill']:.0f} s against {seconds['grpo']:.0f} s "
                      f"({seconds['distill'] / seconds['grpo']:.2f}x)."]
    else:
        lines += ["", f"RL steps to the target: distillation {steps['distill']}, GRPO {steps['grpo']} (None: not "
                      f"reached within the run)."]
    return lines + [""] + curve_table(runs)


def curve_table(runs: dict[str, list[dict]]) -> list[str]:
    """The RL arms' held-out accuracy at a few RL steps, the mean of the seeds' validations."""
    steps = TASKS[TASK]["shown_steps"]
    lines = ["Mean of the seeds after N RL steps: the held-out exact match of the validation then, and for the "
             "distillation arms the reverse KL to the teacher on step N's own rollout (nats per token):", "",
             "| arm | " + " | ".join(f"step {s}" for s in steps) + " |", "|---|" + "---|" * len(steps)]
    for arm in ("grpo", "distill", "distill_task_reward"):
        at = [{step: accuracy for step, accuracy, _ in r["curve"]} for r in runs[arm]]
        lines.append(f"| {ARMS[arm]} | " + " | ".join(f"{statistics.mean(a[s] for a in at):.1%}" for s in steps) + " |")
    for arm in ("distill", "distill_task_reward"):  # the step's own rollout: how far the student is from the teacher
        kl = [statistics.mean(r["reverse_kl"][s] for r in runs[arm]) for s in steps]
        lines.append(f"| {ARMS[arm]}: distill/reverse_kl | " + " | ".join(f"{v:.3f}" for v in kl) + " |")
    return lines


def plot(runs: dict[str, list[dict]], target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(11, 3.8))
    colours = {"grpo": "tab:blue", "distill": "tab:orange", "distill_task_reward": "tab:green", "sft": "tab:red"}
    for arm, label in ARMS.items():
        for seed, r in zip(SEEDS, runs[arm], strict=True):
            shown = label if seed == SEEDS[0] else None
            if r["curve"]:
                by_step.plot([c[0] for c in r["curve"]], [c[1] for c in r["curve"]], color=colours[arm],
                             alpha=0.9 if seed == SEEDS[0] else 0.5, label=shown)
                by_time.plot([c[2] / 60 for c in r["curve"]], [c[1] for c in r["curve"]], color=colours[arm],
                             alpha=0.9 if seed == SEEDS[0] else 0.5, label=shown)
            else:  # SFT: one point, after sampling and training
                a = r["accuracy"]
                by_step.axhline(a["mean"], color=colours[arm], linestyle=":", label=shown)
                by_time.errorbar([r["time_s"] / 60], [a["mean"]], yerr=[[a["mean"] - a["ci_low"]],
                                                                        [a["ci_high"] - a["mean"]]],
                                 color=colours[arm], marker="s", label=shown)
    for axis in (by_step, by_time):
        axis.axhline(target, color="grey", linestyle="--", linewidth=0.8, label="90% of the teacher")
        axis.set(ylabel="held-out exact match", ylim=(0, 1))
    by_step.set(xlabel="RL step")
    by_time.set(xlabel="minutes of training steps (SFT: sampling + training)")
    by_step.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    global TASK, OUT
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), default="calculator")
    parser.add_argument("--resume", action="store_true", help="keep the runs an interrupted call finished")
    args = parser.parse_args()
    TASK, OUT = args.task, ROOT / "logs" / "bench_distillation" / args.task
    teacher_dir = OUT / "teacher_policy"
    if not args.resume or not (teacher_dir / "config.json").is_file():
        (OUT / "grpo_seed0" / "result.json").unlink(missing_ok=True)
    teacher = rl_result(cached("grpo_seed0", args.resume, lambda: train_rl(
        "grpo_seed0", [f"experiment={TASK}_grpo", "seed=0", f"export_dir={teacher_dir}"])))
    target = TARGET_SHARE * teacher["accuracy"]["mean"]
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    for seed in SEEDS:
        distill = [f"experiment={TASK}_distill", f"teacher.name_or_path={teacher_dir}", f"seed={seed}"]
        for arm, overrides in (("grpo", [f"experiment={TASK}_grpo", f"seed={seed}"]), ("distill", distill),
                               ("distill_task_reward", [*distill, "algo.task_reward_coef=1.0"])):
            name = f"{arm}_seed{seed}"
            runs[arm].append(teacher if name == "grpo_seed0" else
                             rl_result(cached(name, args.resume, lambda n=name, o=overrides: train_rl(n, o))))
    budget = statistics.mean(r["teacher_tokens"] for r in runs["distill"])
    rows_path = OUT / "teacher_rows.jsonl"
    sampled = cached("teacher_rows", args.resume, lambda: teacher_rows(teacher_dir, budget, rows_path))
    runs["sft"] = [cached(f"sft_seed{seed}", args.resume, lambda s=seed: train_sft(f"sft_seed{s}", rows_path, sampled,
                                                                                    s)) for seed in SEEDS]
    for arm in ("grpo", "distill", "distill_task_reward"):
        for r in runs[arm]:
            r["steps_to_target"], r["seconds_to_target"] = first_reaching(r["curve"], target)
    lines = table(teacher, target, runs)
    lines += ["", f"(c) trained on {sampled['rows']:,} teacher episodes ({sampled['model_tokens']:,} model tokens, "
                  f"sampled in {sampled['sampling_s']:.0f} s). Training time: an RL run's steps (time/step_s, "
                  "validations left out); SFT's sampling and train_sft.py, its start-up included."]
    results = {"task": TASK, "teacher": teacher, "target": target, "runs": runs, "teacher_samples": sampled,
               "machine": machine()}
    name = f"distillation_{TASK}"
    (BENCH / "results" / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    (BENCH / "results" / f"{name}.md").write_text("\n".join(lines) + "\n")
    plot(runs, target, ROOT / "docs" / "images" / f"{name}.png")
    fill_results(name, ["docs/distillation.md"])
    record(name)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
