"""Builds the calculator task's embedded distillation teacher: the policy GRPO trains on the task, exported.

    python scripts/build_teacher.py      # writes lit_rlhf/assets/tiny-calculator-teacher/ (a few minutes on 2 cores)

It runs, as a user would, `python train.py experiment=calculator_grpo seed=0 export_dir=<folder>` (150 RL steps of
GRPO from lit_rlhf/assets/tiny-calculator, the recipe of docs/distillation.md's measured teacher) and ships the
exported folder (LoRA merged, the tokenizer beside it), which `experiment=calculator_distill` distills from.
Reproducible on a machine: seeded, deterministic CPU training.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEACHER_DIR = ROOT / "lit_rlhf" / "assets" / "tiny-calculator-teacher"
RECIPE = ["experiment=calculator_grpo", "seed=0"]


def main() -> None:
    with tempfile.TemporaryDirectory() as work:
        exported = Path(work) / TEACHER_DIR.name
        command = [sys.executable, str(ROOT / "train.py"), *RECIPE, f"export_dir={exported}",
                   f"hydra.run.dir={Path(work) / 'run'}"]
        print("$", " ".join(command[1:]), flush=True)
        subprocess.run(command, check=True, cwd=work)
        shutil.rmtree(TEACHER_DIR, ignore_errors=True)
        shutil.copytree(exported, TEACHER_DIR)
    card = TEACHER_DIR / "README.md"  # its model card, with paths of the repository instead of this machine's
    card.write_text(repository_paths(card.read_text(), exported))
    print(f"Wrote {TEACHER_DIR}")


def repository_paths(text: str, exported: Path) -> str:
    return text.replace(str(exported), str(TEACHER_DIR.relative_to(ROOT))).replace(f"{ROOT}/", "")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()  # --help; no options
    main()
