"""GSPO, LUSPO, CISPO, SAPO and VESPO against DAPO on the arithmetic task, and DAPO's policy loss on the high-entropy
tokens only (algo.top_entropy_quantile), at equal episodes, as a user runs them:
`python train.py experiment=arithmetic_grpo algo.num_iterations=2 <the loss's settings>`.

    python bench/policy_losses.py          # 7 runs of 400 RL steps x 16 prompts x 4 samples; ~15 min on 2 cores

Two updates per rollout (num_iterations=2): with one, every loss has the clipped surrogate's gradient (the
ratio is 1), so they would not differ. Reports the end-of-run evaluation on the 200 held-out questions (4
samples each): exact-match accuracy of the reference (before) and the policy (after) with 95% bootstrap
intervals, the held-out KL before (0) and after. Writes bench/results/policy_losses.md and .json and the table into
docs/algorithms.md.
"""

from __future__ import annotations

from arithmetic import BENCH, cell, run
from command_line import takes_no_options
from results_blocks import publish

TWO_UPDATES = ("algo.num_iterations=2",)
LOSSES = {  # label: (run directory, settings)
    "DAPO (clip-higher 0.28, zero-std groups filtered)": ("dapo", ("algo.cliprange_high=0.28",
                                                                   "algo.filter_zero_std_groups=true")),
    "GSPO (sequence-level ratio, clip 3e-4 / 4e-4)": ("gspo", ("algo.importance_sampling_level=sequence",)),
    "LUSPO (GSPO's ratio and clip, each sequence's loss times its length)": (
        "luspo", ("algo.importance_sampling_level=sequence", "algo.loss_type=luspo")),
    "CISPO (cap 5)": ("cispo", ("algo.policy_loss=cispo",)),
    "SAPO (tau 1.0 / 1.05)": ("sapo", ("algo.policy_loss=sapo",)),
    "VESPO (k, lambda 2, 3 / 3, 2)": ("vespo", ("algo.policy_loss=vespo",)),
    "DAPO on the top 20% of tokens by entropy (Beyond the 80/20 Rule)": (
        "dapo_top_entropy", ("algo.cliprange_high=0.28", "algo.filter_zero_std_groups=true",
                             "algo.top_entropy_quantile=0.2")),
}


def main() -> None:
    out = BENCH / "results" / "policy_loss_runs"
    results = []
    for label, (name, overrides) in LOSSES.items():
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
    takes_no_options(__doc__)
    main()
