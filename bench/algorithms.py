"""Every algorithm on the embedded default, run as a user runs it (`python train.py algo=...`), at equal
episodes (150 RL steps x 8 prompts x 4 samples = 4,800), seed 0.

    python bench/algorithms.py            # ~10 minutes on 2 CPU cores; writes bench/results/algorithms.md

Reports the held-out mean score and KL to the reference before (step 0) and after training (16 prompts, the same
sampling seed), the end-of-run evaluation's score difference to the reference with its 95% interval, and the
training speed (`eps`, episodes/s at the last step: the RL step time is 32 / eps seconds) and wall time; and the
end-of-run evaluation of RLOO (the default run) and PPO against the reference (bench/results/evaluation.md, quoted
in docs/evaluation.md); and the reward-hacking monitor's signs on three of the runs (bench/results/monitor_signs.md,
quoted in docs/tasks.md).
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from command_line import takes_no_options
from fingerprint import record
from monitor_replay import replay, table
from results_blocks import fill_results, machine

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RUNS = {
    "RLOO": ["algo=rloo"],
    "PPO": ["algo=ppo"],
    "GRPO": ["algo=grpo"],
    "GRPO, beta=0 (no reference forward)": ["algo=grpo", "algo.beta=0"],
    "Dr. GRPO": ["algo=grpo", "algo.scale_rewards=none", "algo.loss_type=dr_grpo"],
    "DAPO (clip-higher, zero-std filter, overlong penalty)": [
        "algo=grpo", "algo.cliprange_high=0.28", "algo.filter_zero_std_groups=true", "algo.overlong_buffer=8"],
    "GRPO, plain k3 KL term": ["algo=grpo", "algo.use_bias_correction_kl=false"],
    "DAPO, plain k3 KL term": [
        "algo=grpo", "algo.cliprange_high=0.28", "algo.filter_zero_std_groups=true", "algo.overlong_buffer=8",
        "algo.use_bias_correction_kl=false"],
    "REINFORCE++-baseline": ["algo=reinforce_pp"],
    "REINFORCE++": ["algo=reinforce_pp", "algo.baseline=none"],
}
# the runs whose reward-hacking signs docs/tasks.md shows: the default, GRPO without a KL term, DAPO's recipe
MONITORED = ("RLOO", "GRPO, beta=0 (no reference forward)", "DAPO (clip-higher, zero-std filter, overlong penalty)")


def heldout(rows: list[dict], key: str) -> tuple[float, float]:
    values = [float(r[key]) for r in rows if r.get(key)]
    return values[0], values[-1]


def run(name: str, overrides: list[str], out: Path) -> dict:
    run_dir = out / re.sub(r"[^A-Za-z0-9+]+", "_", name).strip("_")  # one folder per row, rerun in place
    start = time.time()
    subprocess.run([sys.executable, "train.py", *overrides, f"hydra.run.dir={run_dir}", "overwrite_run_dir=true"],
                   cwd=ROOT, check=True,
                   capture_output=True)
    wall = time.time() - start
    result = json.loads((run_dir / "result.json").read_text())["metrics"]
    rows = list(csv.DictReader((run_dir / "csv" / "metrics.csv").open()))
    score, kl = heldout(rows, "eval/scores"), heldout(rows, "eval/kl")
    evaluation = json.loads((run_dir / "evaluation" / "evaluation.json").read_text())
    return {"name": name, "overrides": " ".join(overrides), "score": score, "kl": kl, "wall_s": wall,
            "eps": result["eps"], "diff": result["eval/score_diff"], "diff_low": result["eval/score_diff_ci_low"],
            "evaluation": evaluation, "run_dir": str(run_dir.relative_to(ROOT)), "kl_steps": kl_steps(rows)}


def kl_steps(rows: list[dict], budget: float = 10.0) -> dict | None:
    """The training KL (objective/kl) per RL step: its peak and how many steps were above the budget; None when
    the run computes no KL (kl_coef 0: no reference forward)."""
    kl = [float(r["objective/kl"]) for r in rows if r.get("objective/kl")]
    return {"peak": max(kl), "above_budget": sum(k > budget for k in kl), "steps": len(kl)} if kl else None


def kl_cell(steps: dict | None) -> str:
    return "not computed" if steps is None else f"{steps['peak']:.1f}, {steps['above_budget']} of {steps['steps']}"


def evaluation_table(results: list[dict]) -> list[str]:
    """The end-of-run evaluation of the default run (RLOO) and of algo=ppo, beside the reference."""
    shown = [r for r in results if r["name"] in ("RLOO", "PPO")]
    evaluations = [r["evaluation"] for r in shown]
    first = evaluations[0]
    header = (f"| {first['num_prompts']} held-out prompts x {first['samples_per_prompt']} samples, seed "
              f"{first['seed']} | " + " | ".join(f"{r['name']} policy" for r in shown) + " | reference |")

    def row(label: str, cell, reference: str = "") -> str:
        return f"| {label} | " + " | ".join(cell(e) for e in evaluations) + f" | {reference} |"

    def interval(value: dict, percent: bool = False) -> str:
        if percent:
            return f"{value['mean']:.1%} [{value['ci_low'] * 100:.1f}, {value['ci_high'] * 100:.1f}]"
        return f"{value['mean']:+.3f} [{value['ci_low']:+.3f}, {value['ci_high']:+.3f}]"

    ref = first["reference"]
    return [header, "|---|" + "---|" * (len(shown) + 1),
            row("mean score (std)", lambda e: f"{e['policy']['score_mean']:.3f} ({e['policy']['score_std']:.3f})",
                f"{ref['score_mean']:.3f} ({ref['score_std']:.3f})"),
            row("score difference to the reference, 95% CI", lambda e: interval(e["score_difference"])),
            row("win rate over the reference, 95% CI", lambda e: interval(e["win_rate"], percent=True)),
            row("KL to the reference (k1, summed over tokens)", lambda e: f"{e['policy']['kl_mean']:.2f}", "0"),
            row("mean response length, EOS rate",
                lambda e: f"{e['policy']['length_mean']:.1f}, {e['policy']['eos_rate']:.0%}",
                f"{ref['length_mean']:.1f}, {ref['eos_rate']:.0%}"),
            row("distinct-1, distinct-2",
                lambda e: f"{e['policy']['distinct_1']:.3f}, {e['policy']['distinct_2']:.3f}",
                f"{ref['distinct_1']:.3f}, {ref['distinct_2']:.3f}")]


def main() -> None:
    out = BENCH / "results" / "algorithms_runs"
    results = [run(name, overrides, out) for name, overrides in RUNS.items()]
    lines = ["| algorithm (`python train.py ...`) | held-out score before -> after | KL before -> after | "
             "score difference to the reference [95% low] | training KL: peak, steps above 10 | episodes/s | "
             "s per RL step | wall |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['name']} (`{r['overrides']}`) | {r['score'][0]:.3f} -> {r['score'][1]:.3f} | "
                     f"{r['kl'][0]:.2f} -> {r['kl'][1]:.2f} | {r['diff']:+.3f} [{r['diff_low']:+.3f}] | "
                     f"{kl_cell(r['kl_steps'])} | "
                     f"{r['eps']:.0f} | {32 / r['eps']:.2f} | {r['wall_s']:.0f} s |")
    (BENCH / "results" / "algorithms.md").write_text("\n".join(lines) + "\n")
    (BENCH / "results" / "algorithms.json").write_text(json.dumps({"runs": results, "machine": machine()}, indent=1))
    fill_results("algorithms", ["README.md", "docs/algorithms.md"])
    monitored = {f"`python train.py {r['overrides']}`": replay(ROOT / r["run_dir"]) for r in results
                 if r["name"] in MONITORED}
    (BENCH / "results" / "monitor_signs.md").write_text("\n".join(
        ["The reward-hacking monitor on three of the embedded-default runs of `python bench/algorithms.py` (150 RL "
         "steps, seed 0), replayed from their metrics through its own logic at its default thresholds "
         "(`callbacks.reward_hacking_monitor`: \"start\" is the mean of the first 10 RL steps, the other figures "
         "10-step means):", "", *table(monitored)]) + "\n")
    fill_results("monitor_signs", ["docs/tasks.md"])
    record("algorithms", "evaluation", "monitor_signs")
    (BENCH / "results" / "evaluation.md").write_text("\n".join(evaluation_table(results)) + "\n")
    grpo = next(r for r in results if r["name"] == "GRPO")  # its training curves, KL included, in docs/algorithms.md
    shutil.copyfile(ROOT / grpo["run_dir"] / "curves.png", ROOT / "docs" / "images" / "grpo_default_curves.png")
    fill_results("evaluation", ["docs/evaluation.md"])
    print("\n".join(lines))


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
