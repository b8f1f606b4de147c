"""What the preference scripts' first commands show: `python train_reward_model.py` and `python train_dpo.py` as
typed (the embedded model's own settings, conf/*_tuning/tiny.yaml) and with the settings any other model gets.

    python bench/pair_defaults.py     # ~2 min on 2 CPU cores; writes bench/results/pair_defaults.{md,json}
"""

import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_blocks import publish

ROOT = Path(__file__).resolve().parents[1]
# the settings a model without a tuning file gets (the scripts' own: LoRA, the real-model rates, 1 epoch): the
# embedded model's tuning entry removed from the defaults list
REAL_MODEL = {"train_reward_model.py": ["~reward_model_tuning"], "train_dpo.py": ["~dpo_tuning"]}
HELD_OUT = re.compile(r"Held-out pairs \((\d+)\): accuracy ([\d.]+)(?:, reward margin ([+-][\d.]+).*loss ([\d.]+))?")


def run(script: str, args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = subprocess.run([sys.executable, str(ROOT / script), *args], cwd=tmp, capture_output=True, text=True,
                                env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
        seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"error: python {script} {' '.join(args)} failed: {result.stderr[-2000:]}")
    pairs, accuracy, margin, loss = HELD_OUT.search(result.stdout).groups()
    return {"pairs": int(pairs), "accuracy": float(accuracy), "margin": None if margin is None else float(margin),
            "loss": None if loss is None else float(loss), "seconds": round(seconds, 1)}


def main() -> None:
    rows = []
    for script in ("train_reward_model.py", "train_dpo.py"):
        rows.append({"command": f"python {script}", **run(script, [])})
        rows.append({"command": shlex.join(["python", script, *REAL_MODEL[script]]), **run(script, REAL_MODEL[script])})
    lines = ["The bundled pairs, held-out pairs scored after training (2 CPU cores; `python bench/pair_defaults.py`).",
             "", "| command | held-out accuracy | margin (DPO) | loss (DPO) | seconds |", "|---|---:|---:|---:|---:|"]
    for row in rows:
        margin = "" if row["margin"] is None else f"{row['margin']:+.4f}"
        loss = "" if row["loss"] is None else f"{row['loss']:.4f}"
        lines.append(f"| `{row['command']}` | {row['accuracy']:.3f} ({row['pairs']} pairs) | {margin} | {loss} | "
                     f"{row['seconds']:.0f} |")
    publish("pair_defaults", {"rows": rows}, lines, ["docs/preferences.md"])


if __name__ == "__main__":
    main()
