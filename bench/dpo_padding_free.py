"""train_dpo.py with algo.padding_free=true (packed sequences) against the padded layout, on pairs whose responses
differ in length as real ones do: the bundled pairs' prompts, each response a sentence of the bundled pairs repeated
1 to 12 times (a seeded draw), with the embedded model, full fine-tuning, as a user runs it:
`python train_dpo.py data.dataset=<file> model.lora=null [algo.padding_free=true]`.

    python bench/dpo_padding_free.py      # 6 fits; ~2 min on 2 CPU cores

Reports each fit's wall time (fresh processes, the two settings alternating; medians of 3), the share of pad
positions in the padded layout's batches, and the held-out loss, which the two layouts must give alike. Writes
bench/results/dpo_padding_free.md and .json and the table into docs/preferences.md.
"""

from __future__ import annotations

import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from command_line import takes_no_options
from results_blocks import publish

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ROOT / "lit_rlhf" / "data" / "sentiment" / "pairs.jsonl"
COMMON = ("model.lora=null", "data.max_length=512", "data.batch_size=16")
SETTINGS = {"padded (default)": (), "padding-free": ("algo.padding_free=true",)}
REPS = 3
HELD_OUT_LOSS = re.compile(r"Held-out pairs \(\d+\): .* loss ([\d.]+)")


def long_pairs(path: Path, seed: int = 0) -> Path:
    rng = random.Random(seed)
    rows = [json.loads(line) for line in PAIRS.open()][:320]
    for row in rows:
        for side in ("chosen", "rejected"):
            row[side] = " ".join([row[side].strip()] * rng.randint(1, 12))
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def pad_share(dataset: Path) -> float:
    """Pad positions over all positions of the padded training batches (data.batch_size rows of pairs each)."""
    from lit_rlhf.assets import TINY_PYTHIA
    from lit_rlhf.data.preference_datamodule import PreferenceDataModule

    data = PreferenceDataModule(tokenizer=TINY_PYTHIA, dataset=str(dataset), batch_size=16, max_length=512)
    data.setup("fit")
    pads = positions = 0
    for batch in data.heldout_loader(data.train_pairs):
        pads += int((batch["attention_mask"] == 0).sum())
        positions += batch["attention_mask"].numel()
    return pads / positions


def fit(dataset: Path, settings: tuple[str, ...]) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, str(ROOT / "train_dpo.py"), f"data.dataset={dataset}", *COMMON,
                               *settings, "hydra.run.dir=run"], cwd=tmp, capture_output=True, text=True,
                              env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"error: train_dpo.py {' '.join(settings)} failed: {done.stderr[-2000:]}")
    return seconds, float(HELD_OUT_LOSS.search(done.stdout).group(1))


def main() -> None:
    runs = {name: [] for name in SETTINGS}
    with tempfile.TemporaryDirectory() as folder:
        dataset = long_pairs(Path(folder) / "pairs.jsonl")
        share = pad_share(dataset)
        names = list(SETTINGS)
        for rep in range(REPS):
            for name in names[rep % 2:] + names[:rep % 2]:
                runs[name].append(fit(dataset, SETTINGS[name]))
                print(name, rep, runs[name][-1], flush=True)
    lines = [f"320 of the bundled pairs with each response repeated 1-12 times ({share:.0%} of the padded training "
             f"batches' positions are padding); `python train_dpo.py {' '.join(COMMON)} ...`, 1 epoch; medians of "
             f"{REPS} fresh processes; 2 CPU cores; `python bench/dpo_padding_free.py`.", "",
             "| layout | fit wall time | held-out loss |", "|---|---:|---:|"]
    for name, results in runs.items():
        lines.append(f"| {name} | {statistics.median(s for s, _ in results):.1f} s | {results[0][1]:.4f} |")
    publish("dpo_padding_free", {"runs": runs, "pad_share": share, "settings": {k: list(v) for k, v in
                                                                                 SETTINGS.items()}},
            lines, ["docs/preferences.md"])


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
