"""A fixed reference against one reset to the policy every 100 RL steps (algo.sync_ref_model, alpha 1 with LoRA), on
the arithmetic task with a KL coefficient large enough to hold the policy back, as a user runs them:
`python train.py experiment=arithmetic_grpo algo.kl_coef=0.2 [algo.sync_ref_model=true algo.ref_model_mixup_alpha=1
algo.ref_model_sync_steps=100] seed=<seed>`.

    python bench/reference_sync.py          # 4 runs of 400 RL steps x 16 prompts x 4 samples; ~7 min on 2 cores

Reports, per run, the end-of-run accuracy of the policy on the 200 held-out questions (4 samples each, a 95%
bootstrap interval), the training KL (`objective/kl`, to the run's reference of that step) averaged over the last 50
RL steps, and the wall time. With resets the end-of-run evaluation's reference is the last reset's policy, so the
starting model's accuracy is the fixed-reference runs'. Writes bench/results/reference_sync.md and .json and the
table into docs/callbacks.md.
"""

from __future__ import annotations

import csv
from pathlib import Path

from arithmetic import BENCH, ROOT, cell, run
from command_line import takes_no_options
from results_blocks import publish

KL = ("algo.kl_coef=0.2",)
ARMS = {  # label: (run directory, settings)
    "fixed reference": ("fixed", KL),
    "reset every 100 RL steps": ("reset_100", KL + ("algo.sync_ref_model=true", "algo.ref_model_mixup_alpha=1",
                                                    "algo.ref_model_sync_steps=100")),
}
SEEDS = (0, 1)
LAST_STEPS = 50


def late_kl(run_dir: Path) -> float:
    """objective/kl averaged over the run's last LAST_STEPS logged RL steps."""
    rows = [r for r in csv.DictReader((run_dir / "csv" / "metrics.csv").open()) if r.get("objective/kl")]
    late = rows[-LAST_STEPS:]
    return sum(float(r["objective/kl"]) for r in late) / len(late)


def main() -> None:
    out = BENCH / "results" / "reference_sync_runs"
    results = []
    for label, (name, overrides) in ARMS.items():
        for seed in SEEDS:
            result = run("grpo", seed, out, overrides, name=name)
            results.append({**result, "arm": label, "overrides": list(overrides),
                            "late_kl": late_kl(ROOT / result["run_dir"])})
    lines = ["| `experiment=arithmetic_grpo ...` | seed | accuracy after (held-out, 4 samples) | training KL to the "
             f"step's reference (last {LAST_STEPS} steps) | wall |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['arm']} (`{' '.join(r['overrides'])}`) | {r['seed']} | "
                     f"{cell(r['task']['policy']['accuracy'])} | {r['late_kl']:.3f} | {r['wall_s']:.0f} s |")
    start = results[0]["task"]["reference"]["accuracy"]
    means = {arm: sum(r["task"]["policy"]["accuracy"]["mean"] for r in results if r["arm"] == arm) / len(SEEDS)
             for arm in ARMS}
    lines += ["", f"The starting model: {cell(start)}. Mean accuracy after, over the seeds: "
              + "; ".join(f"{arm} {mean:.1%}" for arm, mean in means.items()) + "."]
    publish("reference_sync", {"runs": results}, lines, ["docs/callbacks.md"])


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
