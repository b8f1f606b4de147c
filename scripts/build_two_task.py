"""Builds the two-task base and its two teachers, for one student distilled from a teacher per task
(`experiment=two_task_distill`, docs/distillation.md "Several teachers").

    python scripts/build_two_task.py    # writes lit_rlhf/assets/tiny-two-task/ (the base), lit_rlhf/data/two_task/
                                        # (the mixed prompts) and lit_rlhf/assets/tiny-two-task-<task>-teacher/
                                        # (each teacher's LoRA adapter); about 35 min on 2 cores

The base continues tiny-calculator's pre-training (the same tokenizer, whose byte-level alphabet also spells the
arithmetic questions) on both tasks' corpora: scripts/build_calculator.py's tool-use episodes and, three episodes in
four, scripts/build_arithmetic.py's noisy answers (half of them right, where tiny-arithmetic's corpus has a quarter:
the base has fewer steps to learn the sums in). The mixed prompts are questions of each task that neither task's
bundled set holds, with a `data_source` column naming the task. Each teacher is the policy 150 RL steps of GRPO
train from the base on that task's bundled prompts (`python train.py experiment=two_task_grpo data=<task>`), its
LoRA adapter exported. Seeded, deterministic CPU training.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import build_arithmetic
import build_calculator
import torch
from build_arithmetic import EOS, PAD
from transformers import AutoTokenizer, GPTNeoXForCausalLM

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "lit_rlhf" / "assets"
BASE_DIR = ASSETS / "tiny-two-task"
DATA_DIR = ROOT / "lit_rlhf" / "data" / "two_task"
TASKS = ("calculator", "arithmetic")


def teacher_dir(task: str) -> Path:
    return ASSETS / f"tiny-two-task-{task}-teacher"


def mixed_prompts(per_task: int, seed: int) -> list[dict]:
    """`per_task` questions of each task outside its bundled set, shuffled, each row naming its data_source."""
    rng = random.Random(seed)
    bundled = {task: {json.loads(line)["prompt"] for line in (ROOT / "lit_rlhf" / "data" / task / "prompts.jsonl")
                      .read_text().splitlines() if line.strip()} for task in TASKS}
    calculator = [r for r in build_calculator.questions(4 * per_task, seed + 1) if r["prompt"] not in bundled[
        "calculator"]]
    arithmetic = [r for r in build_arithmetic.questions() if r["prompt"] not in bundled["arithmetic"]]
    rows = [{**r, "data_source": "calculator"} for r in rng.sample(calculator, per_task)]
    rows += [{**r, "data_source": "arithmetic"} for r in rng.sample(arithmetic, per_task)]
    rng.shuffle(rows)
    return rows


def pretrain_on_both(tokenizer, args) -> GPTNeoXForCausalLM:
    """tiny-calculator, trained further on episodes of either task (an arithmetic one with probability
    args.arithmetic_share)."""
    calculator_rows = build_calculator.questions(3000, 0)  # tiny-calculator's own corpus
    arithmetic_rows = build_arithmetic.questions()  # tiny-arithmetic's: every question, noisy answers

    def episode(rng: random.Random) -> tuple[list[int], list[int]]:
        if rng.random() >= args.arithmetic_share:
            row = calculator_rows[rng.randrange(len(calculator_rows))]
            turns = build_calculator.teacher_episode(row, rng, args.p_tool, args.p_bad_call)
        else:
            row = arithmetic_rows[rng.randrange(len(arithmetic_rows))]
            answer = build_arithmetic.teacher_completion(row["answer"], rng, args.p_correct, args.p_misformat)
            turns = [(f"{answer}{EOS}", True)]
        return build_calculator.encode(tokenizer, row, turns)

    model = GPTNeoXForCausalLM.from_pretrained(build_calculator.MODEL_DIR)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    return build_calculator.train_on_episodes(model, tokenizer, episode, args)


def train_teacher(task: str, work: Path) -> None:
    """GRPO from the base on the task's bundled prompts, as a user types it; its LoRA adapter exported."""
    run = work / task
    command = [sys.executable, str(ROOT / "train.py"), "experiment=two_task_grpo", f"data={task}", "seed=0",
               f"hydra.run.dir={run}"]
    print("$", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)
    shutil.rmtree(teacher_dir(task), ignore_errors=True)
    subprocess.run([sys.executable, "-m", "lit_rlhf.export", str(run / "checkpoints" / "last.ckpt"),
                    str(teacher_dir(task)), "--adapter-only"], check=True, cwd=ROOT)
    for name in ("README.md", "adapter_config.json"):  # the repository's paths instead of this machine's
        written = teacher_dir(task) / name
        if written.is_file():
            written.write_text(written.read_text().replace(str(run), f"<the {task} teacher's run>")
                               .replace(f"{ROOT}/", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=3000, help="further pre-training steps")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--arithmetic-share", type=float, default=0.75,
                        help="of the episodes (tiny-calculator knows the calculator task already)")
    parser.add_argument("--p-correct", type=float, default=0.5,
                        help="the arithmetic answers' share that is right (tiny-arithmetic's corpus: 0.25)")
    parser.add_argument("--prompts-per-task", type=int, default=1500)
    parser.add_argument("--teachers-only", action="store_true", help="keep the base and the prompts already built")
    args = parser.parse_args()
    recipe = argparse.Namespace(**vars(args), p_tool=0.2, p_bad_call=0.1, p_misformat=0.25)
    start = time.time()
    if not args.teachers_only:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        with open(DATA_DIR / "prompts.jsonl", "w") as f:
            for row in mixed_prompts(args.prompts_per_task, args.seed):
                f.write(json.dumps(row) + "\n")
        tokenizer = AutoTokenizer.from_pretrained(build_calculator.MODEL_DIR)
        model = pretrain_on_both(tokenizer, recipe)
        model.generation_config.pad_token_id = tokenizer.convert_tokens_to_ids(PAD)
        model.save_pretrained(BASE_DIR)
        tokenizer.save_pretrained(BASE_DIR)
        print(f"pre-trained in {time.time() - start:.0f} s", flush=True)
    with tempfile.TemporaryDirectory() as work:
        for task in TASKS:
            train_teacher(task, Path(work))
    print(f"Wrote {BASE_DIR}, {DATA_DIR} and the teachers in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
