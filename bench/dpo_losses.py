"""train_dpo.py's loss types side by side on the bundled sentiment pairs, each at TRL's defaults (beta 0.1; robust with
label_smoothing 0.1, exo_pair with TRL's recommended 1e-3), full fine-tuning of the embedded model for 3 epochs, as a
user runs them: `python train_dpo.py model.lora=null epochs=3 algo.loss_type=<type>`; and two combinations, TRL's
MPO recipe and WPO (algo.use_weighting=true).

    python bench/dpo_losses.py          # 17 fits and 17 evaluations; ~9 min on 2 CPU cores

Each saved policy is measured against the model it started from as bench/tr_dpo.py measures it (its fits and
measures are that script's): accuracy on gold-labelled pairs no run trained on (the implicit reward), and
`evaluate.py`'s gold score difference and KL on 64 held-out prompts. One seed: a row's interval is over prompts, not
over training runs. Writes bench/results/dpo_losses.md and .json and the table into docs/preferences.md.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from command_line import takes_no_options
from pair_defaults import unseen_gold_pairs
from results_blocks import publish
from tr_dpo import BASE, EVAL_PROMPTS, fit_and_measure

from lit_rlhf.algos.dpo_losses import LOSS_TYPES

EXTRA = {"robust": ("algo.label_smoothing=0.1",), "exo_pair": ("algo.label_smoothing=1e-3",)}
COMBINATIONS = {"MPO (TRL's recipe)": ("algo.loss_type=[sigmoid,bco_pair,sft]", "algo.loss_weights=[0.8,0.2,1.0]"),
                "WPO (sigmoid, pairs weighted)": ("algo.loss_type=sigmoid", "algo.use_weighting=true")}
SEED = 0


def main() -> None:
    arms = {loss_type: (f"algo.loss_type={loss_type}", *EXTRA.get(loss_type, ())) for loss_type in LOSS_TYPES}
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        gold = unseen_gold_pairs(Path(folder))
        gold_pairs = sum(1 for _ in gold.open())
        for label, settings in {**arms, **COMBINATIONS}.items():
            runs.append({"arm": label, "settings": list(settings), **fit_and_measure(settings, SEED, gold)})
            print(runs[-1], flush=True)
    lines = [f"`python train_dpo.py {' '.join(BASE)} ...` on the bundled pairs, seed {SEED}; measured against the "
             f"starting model: accuracy on {gold_pairs} gold-labelled pairs no run trained on (implicit reward), and "
             f"`evaluate.py` on {EVAL_PROMPTS} held-out prompts x 4 samples (gold score difference with a 95% interval "
             "over prompts, KL); 2 CPU cores; `python bench/dpo_losses.py`.", "",
             "| loss | settings | gold-pair accuracy | score difference (policy - start) | KL to the start | fit |",
             "|---|---|---:|---|---:|---:|"]
    for r in runs:
        diff = r["score_difference"]
        lines.append(f"| {r['arm']} | {' '.join(f'`{s}`' for s in r['settings'])} | {r['gold_pair_accuracy']:.3f} | "
                     f"{diff['mean']:+.3f} [{diff['ci_low']:+.3f}, {diff['ci_high']:+.3f}] | {r['kl_to_start']:.1f} | "
                     f"{r['seconds']:.0f} s |")
    publish("dpo_losses", {"runs": runs, "gold_pairs": gold_pairs, "eval_prompts": EVAL_PROMPTS, "seed": SEED},
            lines, ["docs/preferences.md"])


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
