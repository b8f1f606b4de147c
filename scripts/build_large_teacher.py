"""Builds a larger calculator teacher: the tokenizer and pre-training corpus of lit_rlhf/assets/tiny-calculator, about
four times its parameters, then 150 RL steps of GRPO with full fine-tuning (a LoRA policy cannot move the tool-name
token far enough: bench/tool_name_ceiling.py), exported, and its held-out evaluation written to
bench/results/calculator_large_teacher.{md,json} (and docs/distillation.md's block).

    python scripts/build_large_teacher.py    # writes build/calculator-teacher-large/ (about 25 min on 2 idle cores:
                                             # pre-training, kept in build/ and reused, then the RL run)
    python scripts/build_large_teacher.py --out lit_rlhf/assets/tiny-calculator-teacher-large   # the embedded one
    python train.py experiment=calculator_distill teacher.name_or_path=build/calculator-teacher-large model.lora=null

Pre-training is scripts/build_calculator.py's (episodes from a scripted teacher that names the right tool two times in
three), with --hidden and --layers for the size. Seeded, deterministic CPU training.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from build_arithmetic import PAD
from build_calculator import pretrain, questions
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[1]
STUDENT = ROOT / "lit_rlhf" / "assets" / "tiny-calculator"
TEACHER_DIR = ROOT / "build" / "calculator-teacher-large"
PRETRAINING_TIME = "pretraining_time.json"  # kept beside the pre-trained base, for the results line of a run reusing it
# the settings that make the embedded teacher (lit_rlhf/assets/tiny-calculator-teacher-large)
DEFAULTS = {"hidden": 256, "layers": 4, "steps": 3000, "seed": 0, "rl_lr": 3e-4}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=TEACHER_DIR, help="the folder the exported teacher is written to")
    parser.add_argument("--hidden", type=int, default=DEFAULTS["hidden"])
    parser.add_argument("--layers", type=int, default=DEFAULTS["layers"])
    parser.add_argument("--steps", type=int, default=DEFAULTS["steps"], help="pre-training steps")
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    parser.add_argument("--rl-lr", type=float, default=DEFAULTS["rl_lr"],
                        help="the RL run's learning rate (the student's 1e-3 made this model's KL run away)")
    parser.add_argument("--base-dir", type=Path, default=None,
                        help="where the pre-trained model is kept (default: build/calculator-teacher-large-base-"
                             "<steps>); one found there is not pre-trained again")
    args = parser.parse_args()
    args.base_dir = args.base_dir or ROOT / "build" / f"calculator-teacher-large-base-{args.steps}"
    build = argparse.Namespace(seed=args.seed, num_prompts=3000, p_tool=0.2, p_bad_call=0.1, steps=args.steps,
                               batch_size=64, lr=2e-3, hidden=args.hidden, layers=args.layers)
    start = time.time()
    base = args.base_dir
    reused = (base / "config.json").is_file()
    if not reused:
        tokenizer = AutoTokenizer.from_pretrained(STUDENT)  # the student's: the teacher must read the same ids
        model = pretrain(questions(build.num_prompts, build.seed), tokenizer, build)
        model.generation_config.pad_token_id = tokenizer.convert_tokens_to_ids(PAD)
        print(f"pre-trained {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters in "
              f"{time.time() - start:.0f} s", flush=True)
        model.save_pretrained(base)
        tokenizer.save_pretrained(base)
        (base / PRETRAINING_TIME).write_text(json.dumps({"seconds": time.time() - start}))
    recorded = base / PRETRAINING_TIME  # absent beside a base kept by an older version of this script
    pretraining_s = json.loads(recorded.read_text())["seconds"] if recorded.is_file() else None
    rl_start = time.time()
    with tempfile.TemporaryDirectory() as work:
        exported = Path(work) / args.out.name
        command = [sys.executable, str(ROOT / "train.py"), "experiment=calculator_grpo", f"seed={args.seed}",
                   f"model.name_or_path={base}", "model.lora=null", f"algo.optimizer.lr={args.rl_lr}",
                   f"export_dir={exported}",
                   f"hydra.run.dir={Path(work) / 'run'}"]
        print("$", " ".join(command[1:]), flush=True)
        subprocess.run(command, check=True, cwd=ROOT)
        shutil.rmtree(args.out, ignore_errors=True)
        shutil.copytree(exported, args.out)
        evaluation = json.loads((Path(work) / "run" / "evaluation" / "evaluation.json").read_text())
    parameters = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(args.out).parameters())
    timing = {"pretraining_seconds": pretraining_s, "pretraining_reused": reused, "rl_seconds": time.time() - rl_start}
    publish_evaluation(evaluation["task_metrics"]["exact_match"], args, parameters, timing)
    card = args.out / "README.md"  # its model card, with what the base is instead of this machine's paths
    if card.is_file():
        shown = str(args.out.resolve().relative_to(ROOT)) if args.out.resolve().is_relative_to(ROOT) else args.out.name
        text = card.read_text().replace(str(exported), shown)
        rebuild = command_line(args) + (f" --out {shown}" if args.out != TEACHER_DIR else "")
        text = text.replace(f"`{base}`", f"{base_description(args, parameters)} (`{rebuild}` rebuilds it)")
        card.write_text(text.replace(f"{ROOT}/", ""))
    print(f"Wrote {args.out} in {time.time() - start:.0f} s")


def command_line(args: argparse.Namespace) -> str:
    """The command as typed, its settings that change the teacher (not the folders) where they are not the defaults."""
    chosen = [f"--{name.replace('_', '-')} {getattr(args, name):g}" for name, default in DEFAULTS.items()
              if getattr(args, name) != default]
    return " ".join(["python scripts/build_large_teacher.py", *chosen])


def base_description(args: argparse.Namespace, parameters: int) -> str:
    return (f"a GPT-NeoX of {parameters / 1e6:.2f}M parameters (hidden {args.hidden}, {args.layers} layers) with "
            f"tiny-calculator's tokenizer, pre-trained {args.steps} steps on its corpus")


def time_taken(timing: dict) -> str:
    """"pre-training 20 min, RL 3 min", saying when the pre-training was an earlier run's (kept in build/)."""
    seconds = timing["pretraining_seconds"]
    pretraining = "pre-training of unrecorded length" if seconds is None else f"pre-training {seconds / 60:.0f} min"
    kept = " (an earlier run's, kept)" if timing["pretraining_reused"] else ""
    return f"{pretraining}{kept}, RL {timing['rl_seconds'] / 60:.0f} min"


def publish_evaluation(exact_match: dict, args: argparse.Namespace, parameters: int, timing: dict) -> None:
    """bench/results/calculator_large_teacher.{md,json}: the teacher's and its pre-trained base's held-out accuracy."""
    sys.path.insert(0, str(ROOT / "bench"))
    from results_blocks import publish

    cell = lambda a: f"{a['mean']:.1%} [{a['ci_low']:.1%}, {a['ci_high']:.1%}]"  # noqa: E731
    description = base_description(args, parameters)
    lines = [f"{description[0].upper()}{description[1:]}, then 150 RL steps of "
             f"`experiment=calculator_grpo model.lora=null algo.optimizer.lr={args.rl_lr:g}`; held-out exact match "
             f"(200 questions x 4 samples, 95% CI); `{command_line(args)}` ({time_taken(timing)}):", "",
             "| model | exact match |", "|---|---|",
             f"| the pre-trained base | {cell(exact_match['reference']['accuracy'])} |",
             f"| the teacher (after GRPO) | {cell(exact_match['policy']['accuracy'])} |"]
    publish("calculator_large_teacher", {"exact_match": exact_match, "parameters": parameters, "hidden": args.hidden,
                                         "layers": args.layers, "pretraining_steps": args.steps,
                                         "rl_lr": args.rl_lr, **timing}, lines, ["docs/distillation.md"])


if __name__ == "__main__":
    main()
