"""GSPO, CISPO and SAPO against DAPO on the arithmetic task, at equal episodes, as a user runs them:
`python train.py experiment=arithmetic_grpo algo.num_iterations=2 <the loss's settings>`.

    python bench/policy_losses.py          # 4 runs of 400 RL steps x 16 prompts x 4 samples; ~10 min on 2 cores

Two updates per rollout (num_iterations=2): with one, every loss has the clipped surrogate's gradient (the
ratio is 1), so they would not differ. Reports the end-of-run evaluation on the 200 held-out questions (4
samples each): exact-match accuracy of the reference (before) and the policy (after) with 95% bootstrap
intervals, the held-out KL before (0) and after. Writes bench/results/policy_losses.md and .json and the table into
docs/algorithms.md.
"""

from __future__ import annotations

from arithmetic import BENCH, cell, run
from results_blocks import publish

TWO_UPDATES = ("algo.num_iterations=2",)
LOSSES = {
    "DAPO (clip-higher 0.28, zero-std groups filtered)": ("algo.cliprange_high=0.28",
                                                           "algo.filter_zero_std_groups=true"),
    "GSPO (sequence-level ratio, clip 3e-4 / 4e-4)": ("algo.importance_sampling_level=sequence",),
    "CISPO (cap 5)": ("algo.policy_loss=cispo",),
    "SAPO (tau 1.0 / 1.05)": ("algo.policy_loss=sapo",),
}


def main() -> None:
    out = BENCH / "results" / "policy_loss_runs"
    results = []
    for label, overrides in LOSSES.items():
        name = label.split()[0].lower()
        result = run("grpo", 0, out, TWO_UPDATES + overrides, name=name)
        results.append({**result, "label": label, "overrides": list(TWO_UPDATES + overrides)})
    lines = ["| loss (`experiment=arithmetic_grpo algo.num_iterations=2 ...`) | accuracy before (reference) | "
             "accuracy after | held-out KL before -> after | wall |", "|---|---|---|---|---|"]
    for r in results:
        task = r["task"]
        lines.append(f"| {r['label']} (`{' '.join(r['overrides'][1:])}`) | {cell(task['reference']['accuracy'])} | "
                     f"{cell(task['policy']['accuracy'])} | 0.00 -> {r['kl_after']:.2f} | {r['wall_s']:.0f} s |")
    publish("policy_losses", {"runs": results}, lines, ["docs/algorithms.md"])


if __name__ == "__main__":
    main()
