"""The calculator tool-use task as a user runs it: `python train.py experiment=calculator_<algo> seed=<s>`, and the
same model and budget without the tool (`env=calculator_no_tool`).

    python bench/calculator.py                   # GRPO and RLOO seeds 0 and 1, GRPO without the tool; ~10 min
    python bench/calculator.py --runs grpo:0     # one run (grpo-no-tool:0 for the ablation)

Reports the end-of-run evaluation on the 200 held-out questions (4 samples each): exact-match accuracy and the share
of episodes that call a tool, for the trained policy against its reference (the starting model, same seed), each
with its 95% bootstrap interval; tool errors per episode, the held-out KL, the wall time. Writes
bench/results/calculator.md and .json, the curves (docs/images/calculator_curves.png) and example conversations,
and the table into docs/environments.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

from fingerprint import record
from results_blocks import fill_results, machine

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
ABLATION = "-no-tool"


def run(spec: str, out: Path) -> dict:
    name, seed = spec.rsplit(":", 1)
    algo = name.removesuffix(ABLATION)
    overrides = ["env=calculator_no_tool"] if name.endswith(ABLATION) else []
    run_dir = out / f"{name}_seed{seed}"
    start = time.time()
    subprocess.run([sys.executable, "train.py", f"experiment=calculator_{algo}", f"seed={seed}", *overrides,
                    f"hydra.run.dir={run_dir}", "overwrite_run_dir=true"], cwd=ROOT, check=True, capture_output=True)
    wall = time.time() - start
    summary = json.loads((run_dir / "evaluation" / "evaluation.json").read_text())
    rows = [r for r in csv.DictReader((run_dir / "csv" / "metrics.csv").open())
            if r.get("eval/exact_match") and r.get("eval/tool_calls_mean")]  # validations (not the evaluation's row)
    curve = [(int(r["step"]), float(r["eval/exact_match"]), float(r["eval/tool_calls_mean"])) for r in rows]
    kl = [float(r["eval/kl"]) for r in rows if r.get("eval/kl")]
    generations = [json.loads(line) for line in (run_dir / "evaluation" / "generations.jsonl").open()]
    return {"name": name, "algo": algo, "seed": int(seed), "command": " ".join(
                [f"experiment=calculator_{algo}", f"seed={seed}", *overrides]),
            "wall_s": wall, "task": summary["task_metrics"]["exact_match"], "episodes": summary["episodes"],
            "kl_after": kl[-1] if kl else None, "curve": curve, "examples": generations[:8:2],
            "run_dir": str(run_dir.relative_to(ROOT))}


def cell(value: dict) -> str:
    return f"{value['mean']:.1%} [{value['ci_low']:.1%}, {value['ci_high']:.1%}]"


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (accuracy, calls) = plt.subplots(1, 2, figsize=(10, 3.6))
    for r in results:
        steps = [c[0] for c in r["curve"]]
        accuracy.plot(steps, [c[1] for c in r["curve"]], marker="o", label=r["command"])
        calls.plot(steps, [c[2] for c in r["curve"]], marker="o", label=r["command"])
    accuracy.set(xlabel="RL step", ylabel="held-out exact match", ylim=(0, 1))
    calls.set(xlabel="RL step", ylabel="held-out tool calls per episode", ylim=(0, 1.2))
    accuracy.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", default=["grpo:0", "grpo:1", "rloo:0", "rloo:1", "grpo-no-tool:0"])
    args = parser.parse_args()
    out = BENCH / "results" / "calculator_runs"
    results = [run(spec, out) for spec in args.runs]
    lines = ["| run | accuracy before (reference) | accuracy after | tool use before | tool use after | "
             "tool errors / episode after | held-out KL | wall |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        task, episodes = r["task"], r["episodes"]
        lines.append(f"| `{r['command']}` | {cell(task['reference']['accuracy'])} | "
                     f"{cell(task['policy']['accuracy'])} | {cell(episodes['reference']['tool_call_rate'])} | "
                     f"{cell(episodes['policy']['tool_call_rate'])} | "
                     f"{episodes['policy']['tool_errors_mean']:.2f} | {r['kl_after']:.2f} | {r['wall_s']:.0f} s |")
    lines += ["", f"Example conversations after training (`{results[0]['command']}`, held-out, `[env:...]` marks the "
              f"environment's turns):", ""]
    lines += [f"- `{e['prompt']}` -> `{e['policy']}` (score {e['policy_score']:.0f})" for e in results[0]["examples"]]
    (BENCH / "results" / "calculator.md").write_text("\n".join(lines) + "\n")
    (BENCH / "results" / "calculator.json").write_text(json.dumps({"runs": results, "machine": machine()}, indent=1))
    plot(results, ROOT / "docs" / "images" / "calculator_curves.png")
    fill_results("calculator", ["docs/environments.md"])
    record("calculator")
    print("\n".join(lines))



if __name__ == "__main__":
    main()
