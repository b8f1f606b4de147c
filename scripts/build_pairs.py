"""Builds the bundled preference pairs that train_reward_model.py and train_dpo.py train on by default.

    python scripts/build_pairs.py      # writes lit_rlhf/data/sentiment/pairs.jsonl

The embedded model's own samples on the bundled sentiment prompts, two per prompt (temperature 1, 16 tokens), the
one the embedded reward (VADER) scores higher as `chosen`, ties left out, labels exact: bench/preference_pairs.py
with one pass and no label noise (its held-out prompts' pairs included). Reproducible: seeded.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "lit_rlhf" / "data" / "sentiment" / "pairs.jsonl"

if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    from command_line import takes_no_options
    from preference_pairs import make_pairs

    takes_no_options(__doc__)

    with tempfile.TemporaryDirectory() as scratch:
        made = make_pairs(Path(scratch), passes=1, noise=0.0)
        rows = [(Path(scratch) / f"{name}.jsonl").read_text() for name in ("train", "heldout")]
    OUT.write_text("".join(rows))
    print(f"{OUT.relative_to(ROOT)}: {made['train_pairs'] + made['heldout_pairs']} pairs")
