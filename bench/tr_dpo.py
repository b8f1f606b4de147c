"""DPO against TR-DPO (train_dpo.py's algo.sync_ref_model: the reference moves toward the policy during training) on
the bundled sentiment pairs, full fine-tuning of the embedded model for 3 epochs (84 optimizer steps of 32 pairs), as
a user runs them: `python train_dpo.py model.lora=null epochs=3 seed=<seed> [algo.sync_ref_model=true ...]`.

    python bench/tr_dpo.py          # 9 fits and 9 evaluations; ~4 min on 2 CPU cores

Each saved policy is measured against the model it started from, the same way for every arm (the run's own held-out
figures are against its reference, which TR-DPO moves):
- its accuracy on pairs labelled by the gold (VADER) that no run trained on (bench/pair_defaults.py's set), ordering
  each pair by the implicit reward log pi(y|x) - log pi_start(y|x);
- `python evaluate.py policy_path=<folder> data.num_eval_prompts=64`: the gold score of its samples minus the
  starting model's (a 95% bootstrap interval over prompts) and its KL to the starting model.
Writes bench/results/tr_dpo.md and .json and the table into docs/preferences.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from command_line import takes_no_options
from pair_defaults import dpo_gold_accuracy, unseen_gold_pairs
from preference_pairs import TINY
from results_blocks import publish

ROOT = Path(__file__).resolve().parents[1]
BASE = ("model.lora=null", "epochs=3")
ARMS = {  # label: settings after BASE
    "DPO (a fixed reference)": (),
    "TR-DPO, soft: alpha 0.6 every 8 steps": ("algo.sync_ref_model=true", "algo.ref_model_sync_steps=8"),
    "TR-DPO, hard: alpha 1 every 28 steps (an epoch)": ("algo.sync_ref_model=true", "algo.ref_model_mixup_alpha=1",
                                                        "algo.ref_model_sync_steps=28"),
}
SEEDS = (0, 1, 2)
EVAL_PROMPTS = 64


def command(script: str, args: list[str], cwd: Path) -> str:
    result = subprocess.run([sys.executable, str(ROOT / script), *args], cwd=cwd, capture_output=True, text=True,
                            env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    if result.returncode != 0:
        sys.exit(f"error: python {script} {' '.join(args)} failed: {result.stderr[-2000:]}")
    return result.stdout


def fit_and_measure(settings: tuple[str, ...], seed: int, gold: Path, script: str = "train_dpo.py",
                    read_run: Callable[[Path], dict] | None = None) -> dict:
    """`python <script> model.lora=null epochs=3 <settings>` (train_dpo.py, or train_kto.py), its saved policy measured
    against the starting model; read_run: more figures from the run's folder."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        command(script, [*BASE, *settings, f"seed={seed}", "hydra.run.dir=run"], Path(tmp))
        seconds = time.perf_counter() - start
        policy = Path(tmp) / "run" / "policy"
        command("evaluate.py", [f"policy_path={policy}", f"model.name_or_path={TINY}",
                                f"data.num_eval_prompts={EVAL_PROMPTS}", "hydra.run.dir=eval"], Path(tmp))
        evaluation = json.loads((Path(tmp) / "eval" / "evaluation.json").read_text())
        return {"gold_pair_accuracy": dpo_gold_accuracy(policy, gold),
                "score_difference": evaluation["score_difference"], "kl_to_start": evaluation["policy"]["kl_mean"],
                "seconds": round(seconds, 1), **(read_run(Path(tmp) / "run") if read_run else {})}


def main() -> None:
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        gold = unseen_gold_pairs(Path(folder))
        gold_pairs = sum(1 for _ in gold.open())
        for label, settings in ARMS.items():
            for seed in SEEDS:
                runs.append({"arm": label, "settings": list(BASE + settings), "seed": seed,
                             **fit_and_measure(settings, seed, gold)})
                print(runs[-1], flush=True)
    lines = [f"`python train_dpo.py {' '.join(BASE)} ...` on the bundled pairs; measured against the starting model: "
             f"accuracy on {gold_pairs} gold-labelled pairs no run trained on (implicit reward), and `evaluate.py` on "
             f"{EVAL_PROMPTS} held-out prompts x 4 samples (gold score difference with a 95% interval, KL); 2 CPU "
             "cores; `python bench/tr_dpo.py`.", "",
             "| arm (settings after `model.lora=null epochs=3`) | seed | gold-pair accuracy | score difference "
             "(policy - start) | KL to the start | fit |", "|---|---|---:|---|---:|---:|"]
    for r in runs:
        diff = r["score_difference"]
        extra = " ".join(f"`{s}`" for s in r["settings"][len(BASE):])
        lines.append(f"| {r['arm']}{' (' + extra + ')' if extra else ''} | {r['seed']} | "
                     f"{r['gold_pair_accuracy']:.3f} | {diff['mean']:+.3f} [{diff['ci_low']:+.3f}, "
                     f"{diff['ci_high']:+.3f}] | {r['kl_to_start']:.1f} | {r['seconds']:.0f} s |")
    means = []
    for label in ARMS:
        arm = [r for r in runs if r["arm"] == label]
        means.append(f"{label}: gold-pair accuracy {sum(r['gold_pair_accuracy'] for r in arm) / len(arm):.3f}, "
                     f"score difference {sum(r['score_difference']['mean'] for r in arm) / len(arm):+.3f}, "
                     f"KL {sum(r['kl_to_start'] for r in arm) / len(arm):.1f}")
    lines += ["", f"Means over the {len(SEEDS)} seeds: " + "; ".join(means) + "."]
    publish("tr_dpo", {"runs": runs, "gold_pairs": gold_pairs, "eval_prompts": EVAL_PROMPTS}, lines,
            ["docs/preferences.md"])


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
