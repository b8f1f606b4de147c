"""KTO (train_kto.py: each pair read as a desirable and an undesirable row, no pairing used) against DPO on the
bundled sentiment pairs, full fine-tuning of the embedded model for 3 epochs, as a user runs them:
`python train_kto.py model.lora=null epochs=3 seed=<seed> [algo.loss_type=apo_zero_unpaired]` and
`python train_dpo.py model.lora=null epochs=3 seed=<seed>`.

    python bench/kto.py          # 9 fits and 9 evaluations; ~5 min on 2 CPU cores

Each saved policy is measured against the model it started from as bench/tr_dpo.py measures it (its fits and
measures are that script's): accuracy on gold-labelled pairs no run trained on (ordered by the implicit reward
log pi(y|x) - log pi_start(y|x), which KTO's rewards are too), and `evaluate.py`'s gold score difference and KL on 64
held-out prompts. Writes bench/results/kto.md and .json and the table into docs/preferences.md.
"""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path

from command_line import takes_no_options
from pair_defaults import unseen_gold_pairs
from results_blocks import publish
from tr_dpo import BASE, EVAL_PROMPTS, fit_and_measure

ARMS = {  # label: (script, settings after BASE)
    "DPO (sigmoid, pairs)": ("train_dpo.py", ()),
    "KTO (unpaired rows)": ("train_kto.py", ()),
    "KTO, apo_zero_unpaired (no KL reference point)": ("train_kto.py", ("algo.loss_type=apo_zero_unpaired",)),
}
SEEDS = (0, 1, 2)


def reference_points(run: Path) -> dict:
    """KTO's logged reference point z (`kl`) over the run's training steps: how many were above its clamp at 0."""
    with open(run / "csv" / "metrics.csv") as file:
        z = [float(row["kl"]) for row in csv.DictReader(file) if row.get("kl")]
    return {"steps": len(z), "steps_with_z_above_0": sum(value > 0 for value in z), "largest_z": max(z)}


def main() -> None:
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        gold = unseen_gold_pairs(Path(folder))
        gold_pairs = sum(1 for _ in gold.open())
        for label, (script, settings) in ARMS.items():
            for seed in SEEDS:
                runs.append({"arm": label, "command": f"python {script} {' '.join(BASE + settings)}", "seed": seed,
                             **fit_and_measure(settings, seed, gold, script,
                                               reference_points if settings == () and script == "train_kto.py"
                                               else None)})
                print(runs[-1], flush=True)
    lines = [f"`{' '.join(BASE)}` on the bundled pairs (KTO reads each pair as two labelled rows); measured against "
             f"the starting model: accuracy on {gold_pairs} gold-labelled pairs no run trained on (implicit reward), "
             f"and `evaluate.py` on {EVAL_PROMPTS} held-out prompts x 4 samples (gold score difference with a 95% "
             "interval, KL); 2 CPU cores; `python bench/kto.py`.", "",
             "| arm | command | seed | gold-pair accuracy | score difference (policy - start) | KL to the start "
             "| fit |",
             "|---|---|---|---:|---|---:|---:|"]
    for r in runs:
        diff = r["score_difference"]
        lines.append(f"| {r['arm']} | `{r['command']}` | {r['seed']} | {r['gold_pair_accuracy']:.3f} | "
                     f"{diff['mean']:+.3f} [{diff['ci_low']:+.3f}, {diff['ci_high']:+.3f}] | {r['kl_to_start']:.1f} | "
                     f"{r['seconds']:.0f} s |")
    means = []
    for label in ARMS:
        arm = [r for r in runs if r["arm"] == label]
        means.append(f"{label}: gold-pair accuracy {sum(r['gold_pair_accuracy'] for r in arm) / len(arm):.3f}, "
                     f"score difference {sum(r['score_difference']['mean'] for r in arm) / len(arm):+.3f}, "
                     f"KL {sum(r['kl_to_start'] for r in arm) / len(arm):.1f}, "
                     f"fit {sum(r['seconds'] for r in arm) / len(arm):.0f} s")
    lines += ["", f"Means over the {len(SEEDS)} seeds: " + "; ".join(means) + "."]
    kto = [r for r in runs if "steps_with_z_above_0" in r]
    lines += ["", "KTO's reference point z (`kl`) above its clamp at 0: " + "; ".join(
        f"seed {r['seed']}: {r['steps_with_z_above_0']} of {r['steps']} steps (largest {r['largest_z']:.3f})"
        for r in kto) + "."]
    publish("kto", {"runs": runs, "gold_pairs": gold_pairs, "eval_prompts": EVAL_PROMPTS}, lines,
            ["docs/preferences.md"])


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
