"""Every algorithm on the embedded default, run as a user runs it (`python train.py algo=...`), at equal
episodes (150 RL steps x 8 prompts x 4 samples = 4,800), seed 0.

    python bench/algorithms.py            # ~10 minutes on 2 CPU cores; writes bench/results/algorithms.md

Reports the held-out mean score and KL to the reference before (step 0) and after training (16 prompts, the same
sampling seed), the end-of-run evaluation's score difference to the reference with its 95% interval, and the
training speed (`eps`, episodes/s at the last step: the RL step time is 32 / eps seconds) and wall time.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

from results_blocks import fill_results

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


def heldout(rows: list[dict], key: str) -> tuple[float, float]:
    values = [float(r[key]) for r in rows if r.get(key)]
    return values[0], values[-1]


def run(name: str, overrides: list[str], out: Path) -> dict:
    run_dir = out / name.split(" ")[0].replace(",", "").replace(".", "") / str(len(list(out.glob("*"))))
    start = time.time()
    subprocess.run([sys.executable, "train.py", *overrides, f"hydra.run.dir={run_dir}", "overwrite_run_dir=true"],
                   cwd=ROOT, check=True,
                   capture_output=True)
    wall = time.time() - start
    result = json.loads((run_dir / "result.json").read_text())["metrics"]
    rows = list(csv.DictReader((run_dir / "csv" / "metrics.csv").open()))
    score, kl = heldout(rows, "eval/scores"), heldout(rows, "eval/kl")
    return {"name": name, "overrides": " ".join(overrides), "score": score, "kl": kl, "wall_s": wall,
            "eps": result["eps"], "diff": result["eval/score_diff"], "diff_low": result["eval/score_diff_ci_low"]}


def main() -> None:
    out = BENCH / "results" / "algorithms_runs"
    results = [run(name, overrides, out) for name, overrides in RUNS.items()]
    lines = ["| algorithm (`python train.py ...`) | held-out score before -> after | KL before -> after | "
             "score difference to the reference [95% low] | episodes/s | s per RL step | wall |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['name']} (`{r['overrides']}`) | {r['score'][0]:.3f} -> {r['score'][1]:.3f} | "
                     f"{r['kl'][0]:.2f} -> {r['kl'][1]:.2f} | {r['diff']:+.3f} [{r['diff_low']:+.3f}] | "
                     f"{r['eps']:.0f} | {32 / r['eps']:.2f} | {r['wall_s']:.0f} s |")
    (BENCH / "results" / "algorithms.md").write_text("\n".join(lines) + "\n")
    (BENCH / "results" / "algorithms.json").write_text(json.dumps(results, indent=1))
    fill_results("algorithms", ["README.md", "docs/algorithms.md"])
    print("\n".join(lines))


if __name__ == "__main__":
    main()
