"""The README's sweep, as typed: `python train.py -m algo.kl_coef=0.01,0.05,0.2` (3 x 150 RL steps on the embedded
default), timed, its summary.csv as the table docs/sweeps.md quotes.

    python bench/sweep.py        # ~4 min on 2 CPU cores

Writes bench/results/sweep.md and .json and the table into docs/sweeps.md.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import time

from command_line import takes_no_options
from results_blocks import ROOT, publish

COMMAND = ["train.py", "-m", "algo.kl_coef=0.01,0.05,0.2"]
COLUMNS = ["job", "overrides", "status", "objective", "objective/scores", "objective/kl", "eval/rlhf_reward", "eval/kl"]


def figure(column: str, value: str) -> str:
    if column in ("job", "overrides", "status"):
        return value
    try:
        return f"{float(value):.3f}"
    except ValueError:
        return value


def table(rows: list[dict], minutes: float) -> list[str]:
    lines = [f"`python {' '.join(COMMAND)}` on 2 CPU cores ({minutes:.1f} min; `python bench/sweep.py`):", "",
             "| job | swept overrides | status | objective | objective/scores | objective/kl | eval/rlhf_reward | "
             "eval/kl |", "|---|---|---|---|---|---|---|---|"]
    return lines + ["| " + " | ".join(figure(column, row[column]) for column in COLUMNS) + " |" for row in rows]


if __name__ == "__main__":
    takes_no_options(__doc__)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *COMMAND], cwd=ROOT, capture_output=True, text=True)
    minutes = (time.perf_counter() - start) / 60
    found = re.search(r"Sweep summary \(\d+ runs\): (\S+summary\.csv)", done.stdout)
    if done.returncode != 0 or found is None:
        sys.exit(f"error: the sweep failed (exit code {done.returncode}): {done.stderr.strip()[-500:]}")
    with open(ROOT / found.group(1)) as f:
        rows = list(csv.DictReader(f))
    publish("sweep", {"command": ["python", *COMMAND], "minutes": minutes, "rows": rows}, table(rows, minutes),
            ["docs/sweeps.md"])
