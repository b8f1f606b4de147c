"""Builds the calculator task's larger embedded teacher: the tokenizer and pre-training corpus of
lit_rlhf/assets/tiny-calculator, about four times its parameters, then 150 RL steps of GRPO with full fine-tuning (a
LoRA policy cannot move the tool-name token far enough: bench/tool_name_ceiling.py), exported.

    python scripts/build_large_teacher.py    # writes lit_rlhf/assets/tiny-calculator-teacher-large/ (about 45 min on
                                             # 2 cores: pre-training, then the RL run; the times are printed)
    python train.py experiment=calculator_distill_large    # distills from it

Pre-training is scripts/build_calculator.py's (episodes from a scripted teacher that names the right tool two times in
three), with --hidden and --layers for the size. Seeded, deterministic CPU training.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from build_arithmetic import PAD
from build_calculator import pretrain, questions
from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parents[1]
STUDENT = ROOT / "lit_rlhf" / "assets" / "tiny-calculator"
TEACHER_DIR = ROOT / "lit_rlhf" / "assets" / "tiny-calculator-teacher-large"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=TEACHER_DIR, help="the folder the exported teacher is written to")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1500, help="pre-training steps")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    build = argparse.Namespace(seed=args.seed, num_prompts=3000, p_tool=0.2, p_bad_call=0.1, steps=args.steps,
                               batch_size=64, lr=2e-3, hidden=args.hidden, layers=args.layers)
    start = time.time()
    tokenizer = AutoTokenizer.from_pretrained(STUDENT)  # the student's: the teacher must read the same ids
    model = pretrain(questions(build.num_prompts, build.seed), tokenizer, build)
    model.generation_config.pad_token_id = tokenizer.convert_tokens_to_ids(PAD)
    print(f"pre-trained {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters in "
          f"{time.time() - start:.0f} s", flush=True)
    with tempfile.TemporaryDirectory() as work:
        base = Path(work) / "base"
        model.save_pretrained(base)
        tokenizer.save_pretrained(base)
        exported = Path(work) / args.out.name
        command = [sys.executable, str(ROOT / "train.py"), "experiment=calculator_grpo", f"seed={args.seed}",
                   f"model.name_or_path={base}", "model.lora=null", f"export_dir={exported}",
                   f"hydra.run.dir={Path(work) / 'run'}"]
        print("$", " ".join(command[1:]), flush=True)
        subprocess.run(command, check=True, cwd=ROOT)
        shutil.rmtree(args.out, ignore_errors=True)
        shutil.copytree(exported, args.out)
    card = args.out / "README.md"  # its model card, with the repository's paths instead of this machine's
    if card.is_file():
        shown = str(args.out.resolve().relative_to(ROOT)) if args.out.resolve().is_relative_to(ROOT) else args.out.name
        text = card.read_text().replace(str(exported), shown).replace(str(base), "<the pre-trained model>")
        card.write_text(text.replace(f"{ROOT}/", ""))
    print(f"Wrote {args.out} in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
