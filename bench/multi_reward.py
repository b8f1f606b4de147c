"""GRPO's two ways of training on several rewards, on the arithmetic task's pair (exact match, weight 1, and the
"Answer: <integer>" format, weight 0.2), as a user runs them:
`python train.py experiment=arithmetic_grpo algo.multi_objective_aggregation=<way> seed=<seed>`.

    python bench/multi_reward.py          # 4 runs of 400 RL steps x 16 prompts x 4 samples; ~5 min on 2 cores

sum_then_normalize (TRL's default) normalizes the weighted sum in each group; normalize_then_sum (GDPO) normalizes
each reward in its group, then their weighted sum over the batch. Reports, per run, the end-of-run evaluation on the
200 held-out questions (4 samples each: exact-match accuracy with a 95% bootstrap interval), each reward's training
mean over the last 50 RL steps (`rewards/<name>/mean`), the held-out KL after, and the wall time. Writes
bench/results/multi_reward.md and .json and the table into docs/algorithms.md.
"""

from __future__ import annotations

import csv
from pathlib import Path

from arithmetic import BENCH, ROOT, cell, run
from command_line import takes_no_options
from results_blocks import publish

WAYS = ("sum_then_normalize", "normalize_then_sum")
SEEDS = (0, 1)
REWARDS = ("arithmetic_correct", "arithmetic_format")
LAST_STEPS = 50


def late_means(run_dir: Path) -> dict[str, float]:
    """Each reward's training mean (rewards/<name>/mean) over the run's last LAST_STEPS logged RL steps."""
    rows = [r for r in csv.DictReader((run_dir / "csv" / "metrics.csv").open()) if r.get(f"rewards/{REWARDS[0]}/mean")]
    late = rows[-LAST_STEPS:]
    return {name: sum(float(r[f"rewards/{name}/mean"]) for r in late) / len(late) for name in REWARDS}


def main() -> None:
    out = BENCH / "results" / "multi_reward_runs"
    results = []
    for way in WAYS:
        for seed in SEEDS:
            result = run("grpo", seed, out, (f"algo.multi_objective_aggregation={way}",), name=way)
            results.append({**result, "aggregation": way, "late_rewards": late_means(ROOT / result["run_dir"])})
    lines = ["| `algo.multi_objective_aggregation` | seed | accuracy after (held-out, 4 samples) | exact match, "
             f"training (last {LAST_STEPS} steps) | format, training (last {LAST_STEPS} steps) | held-out KL after | "
             "wall |", "|---|---|---|---|---|---|---|"]
    for r in results:
        late = r["late_rewards"]
        lines.append(f"| `{r['aggregation']}` | {r['seed']} | {cell(r['task']['policy']['accuracy'])} | "
                     f"{late['arithmetic_correct']:.3f} | {late['arithmetic_format']:.3f} | {r['kl_after']:.2f} | "
                     f"{r['wall_s']:.0f} s |")
    reference = results[0]["task"]["reference"]["accuracy"]
    means = {way: sum(r["task"]["policy"]["accuracy"]["mean"] for r in results if r["aggregation"] == way) / len(SEEDS)
             for way in WAYS}
    lines += ["", f"The starting model (the reference): {cell(reference)}. Mean accuracy after, over the seeds: "
              + "; ".join(f"`{way}` {mean:.1%}" for way, mean in means.items()) + "."]
    publish("multi_reward", {"runs": results}, lines, ["docs/algorithms.md"])


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
