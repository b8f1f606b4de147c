"""Where do GRPO's and distillation's updates differ on the calculator task? One run each of GRPO, distillation with
the sampled-token advantage, with the full-vocabulary reverse KL (algo.divergence=generalized_jsd algo.beta=1) and
with the task reward added (algo.task_reward_coef=1); seed 0, 30 RL steps, the experiments' settings, lr 1e-3 for
all unless --lr; a callback records, per RL step:

- the gradient norm before clipping (algo.max_grad_norm is 1.0) and the norm of the step's weight change;
- the sampled-token reverse KL to the embedded teacher (log p_student - log p_teacher, the teacher scored beside the
  GRPO run too), split by where the token sits: inside a `<call>...</call>`, after `Answer:` (the answer's digits),
  or elsewhere;
- the mean |advantage| on the same three kinds of tokens;
- the held-out exact match (every 2 RL steps, from the run's metrics).

    python bench/distill_diagnosis.py    # ~12 min on 2 CPU cores; the runs stay in logs/bench_distill_diagnosis/
    python bench/distill_diagnosis.py --report <that dir>   # runs what it lacks, then reports

Writes bench/results/distill_diagnosis.md and .json and the table into docs/distillation.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import torch
from results_blocks import ROOT, publish

STEPS, VALIDATE_EVERY, SEED = 30, 2, 0
WINDOWS = ((1, 5), (6, 10), (11, 20), (21, 30))
KINDS = ("call", "answer", "other")
METHODS = {"grpo": ("GRPO", "calculator_grpo", []),
           "distill": ("distillation (sampled token)", "calculator_distill", []),
           "distill_full": ("distillation (full-vocabulary reverse KL)", "calculator_distill",
                            ["algo.divergence=generalized_jsd", "algo.beta=1"]),
           "distill_task": ("distillation + task reward (coef 1)", "calculator_distill", ["algo.task_reward_coef=1"])}
TEACHER = ROOT / "lit_rlhf" / "assets" / "tiny-calculator-teacher"


def token_kinds(tokenizer, responses: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N,R) codes: 0 inside a tool call, 1 after an `Answer:` written since the last tool result (the answer's
    tokens), 2 elsewhere; -1 off the model's tokens. From the decoded text before each token."""
    kinds = torch.full(responses.shape, -1, dtype=torch.long)
    for i, row in enumerate(responses.tolist()):
        for t in range(len(row)):
            if not mask[i, t]:
                continue
            before = tokenizer.decode(row[:t])
            in_call = before.rfind("<call>") > before.rfind("</call>")
            answering = "Answer:" in before[before.rfind("</result>") + 1:]  # since the last tool result
            kinds[i, t] = 0 if in_call else 1 if answering else 2
    return kinds


class StepDiagnosis(L.Callback):
    """Records the quantities above to `out` (a JSON line per RL step). Reads the rollout by wrapping the module's
    compute_advantages: a measurement, not a library callback."""

    def __init__(self, out: str, teacher: str):
        self.out, self.teacher_path = Path(out), teacher
        self.teacher, self.seen, self.grad_norm, self.before = None, None, None, None

    def on_fit_start(self, trainer, module) -> None:
        from lit_rlhf.teachers import CausalLMTeacher

        self.teacher = module.sampler.teacher
        if self.teacher is None:  # GRPO: the teacher only observes
            self.teacher = CausalLMTeacher(self.teacher_path)
            self.teacher.load(module.tokenizer)
        compute = module.compute_advantages

        def recording(rollout, penalty):
            advantages, stats = compute(rollout, penalty)
            self.seen = (rollout, advantages.detach())
            return advantages, stats

        module.compute_advantages = recording

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.before = [p.detach().clone() for p in module.trainable_parameters()]

    def on_after_backward(self, trainer, module) -> None:  # one micro-batch per step: the step's whole gradient
        grads = [p.grad for p in module.trainable_parameters() if p.grad is not None]
        self.grad_norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))

    @torch.no_grad()
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        rollout, advantages = self.seen
        update = torch.stack([torch.linalg.vector_norm(p.detach() - b)
                              for p, b in zip(module.trainable_parameters(), self.before, strict=True)])
        teacher = rollout.teacher_logprobs
        if teacher is None:
            # as the Sampler scores a teacher: the episode's observations attended to (forward_mask), not scored
            teacher = self.teacher.logprobs(rollout.queries, rollout.query_mask, rollout.responses,
                                            rollout.forward_mask, module.hparams.temperature,
                                            rollout.columns) * rollout.response_mask
        kl = (rollout.logprobs - teacher).cpu()  # N,R, the sampled-token reverse KL
        kinds = token_kinds(module.tokenizer, rollout.responses.cpu(), rollout.response_mask.cpu())
        record = {"step": module.rl_step, "sequences": len(rollout), "grad_norm": self.grad_norm,
                  "update_norm": float(torch.linalg.vector_norm(update)),
                  "score": float(rollout.scores.float().mean())}
        for code, kind in enumerate(KINDS):
            where = kinds == code
            record[f"tokens_{kind}"] = int(where.sum())
            record[f"kl_{kind}"] = float(kl[where].mean()) if where.any() else None
            record[f"abs_advantage_{kind}"] = float(advantages.cpu()[where].abs().mean()) if where.any() else None
        with self.out.open("a") as file:
            file.write(json.dumps(record) + "\n")


def command(method: str, run_dir: Path, lr: str) -> list[str]:
    _, experiment, extra = METHODS[method]
    return ["train.py", f"experiment={experiment}", *extra, f"steps={STEPS}", f"seed={SEED}",
            f"algo.optimizer.lr={lr}", f"trainer.val_check_interval={VALIDATE_EVERY}", "callbacks.evaluation=null",
            "callbacks.model_checkpoint=null", "+callbacks.diagnosis._target_=distill_diagnosis.StepDiagnosis",
            f"+callbacks.diagnosis.out={run_dir / 'diagnosis.jsonl'}", f"+callbacks.diagnosis.teacher={TEACHER}",
            f"hydra.run.dir={run_dir}"]


def run(method: str, work: Path, lr: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "bench"),
                                                                     os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, *command(method, work / method, lr)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: the {method} run failed (exit code {done.returncode}): {done.stderr.strip()[-800:]}")


def read_run(run_dir: Path) -> dict:
    steps = [json.loads(line) for line in (run_dir / "diagnosis.jsonl").read_text().splitlines()]
    curve, done = {}, 0
    for row in csv.DictReader((run_dir / "csv" / "metrics.csv").open()):
        if row.get("time/step_s"):
            done += 1
        elif row.get("eval/exact_match"):
            curve[done] = float(row["eval/exact_match"])
    return {"steps": steps, "curve": curve}


def mean(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.fmean(values) if values else float("nan")


def table(runs: dict[str, dict], lr: str) -> list[str]:
    lines = [f"Calculator task, seed {SEED}, lr {lr} for all, means over RL-step windows (`python "
             f"bench/distill_diagnosis.py`). KL: the sampled-token reverse KL to the teacher, log p_student - log "
             f"p_teacher, on the tokens inside a tool call, the answer's tokens (after `Answer:`) and the rest; "
             f"abs adv.: the mean absolute advantage on the same tokens (the full-vocabulary loss has none); grad "
             f"norm: before clipping at 1; accuracy: held-out exact match at the window's last step:",
             "", "| method | RL steps | grad norm | update norm | KL call | KL answer | KL other | abs adv. call | "
             "abs adv. answer | abs adv. other | answer tokens / sequence | accuracy |", "|---|---|" + "---|" * 10]
    for method, (label, _, _) in METHODS.items():
        steps, curve = runs[method]["steps"], runs[method]["curve"]
        for first, last in WINDOWS:
            rows = [r for r in steps if first <= r["step"] <= last]
            answer_tokens = mean(rows, "tokens_answer") / mean(rows, "sequences")
            accuracy = curve.get(last - last % VALIDATE_EVERY)
            lines.append(f"| {label} | {first}-{last} | {mean(rows, 'grad_norm'):.2f} | "
                         f"{mean(rows, 'update_norm'):.3f} | "
                         + " | ".join(f"{mean(rows, f'kl_{k}'):.3f}" for k in KINDS) + " | "
                         + " | ".join(f"{mean(rows, f'abs_advantage_{k}'):.3f}" for k in KINDS)
                         + f" | {answer_tokens:.1f} | {'-' if accuracy is None else f'{accuracy:.1%}'} |")
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", type=Path, help="a folder this script filled: run what it lacks, then report")
    parser.add_argument("--lr", default="1e-3", help="both methods' learning rate (default: the experiments')")
    args = parser.parse_args()
    work = args.report or ROOT / "logs" / "bench_distill_diagnosis" / time.strftime("%Y-%m-%d_%H-%M-%S")
    for method in METHODS:
        if not (work / method / "diagnosis.jsonl").exists():
            run(method, work, args.lr)
    runs = {method: read_run(work / method) for method in METHODS}
    data = {"commands": {m: ["python", *command(m, Path("<run dir>"), args.lr)] for m in runs}, "lr": args.lr,
            "runs": {m: {**r, "curve": {str(k): v for k, v in r["curve"].items()}} for m, r in runs.items()}}
    publish("distill_diagnosis", data, table(runs, args.lr), ["docs/distillation.md"])
