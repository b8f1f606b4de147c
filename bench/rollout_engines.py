"""rollout=vllm against rollout=hf: the same RLOO steps (8 prompts x K=4, exactly N new tokens, float32) on the
embedded default and the pythia-160m shape, at 32 and 128 new tokens.

    make setup-vllm && .venv-vllm/bin/python bench/rollout_engines.py    # ~20 minutes on 2 CPU cores
    python bench/rollout_engines.py --models pythia-1b --dtype bfloat16    # GPU, with a GPU build of vLLM

Both engines run in the vLLM environment (.venv-vllm: the same transformers for both). Each measurement is a fresh
process of bench/lit_step.py (1 warm-up step dropped, then --steps steps); the engines alternate, --reps times,
and the table gives medians: episodes/s of the whole RL step, and the rollout phase alone (the engine's `sample`:
for vLLM the weight sync before it, included, and also given alone). Writes bench/results/rollout_engines.md
and .json, and the results block of docs/rollout.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from results_blocks import publish

BENCH = Path(__file__).resolve().parent
ENGINES = ("hf", "vllm")


def measure(engine: str, model: str, new_tokens: int, steps: int, dtype: str) -> dict:
    out = subprocess.run([sys.executable, "lit_step.py", "--rollout", engine, "--model", model, "--new-tokens",
                          str(new_tokens), "--steps", str(steps), "--warmup", "1", "--dtype", dtype], cwd=BENCH,
                         check=True, capture_output=True, text=True)
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith('{"impl"')))


def median(runs: list[dict], key) -> float:
    return statistics.median(key(r) for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["tiny", "pythia-160m"])
    parser.add_argument("--new-tokens", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--dtype", default="float32", help="bfloat16 for the GPU measurement (pythia-1b shape)")
    args = parser.parse_args()
    runs = {(m, n, e): [] for m in args.models for n in args.new_tokens for e in ENGINES}
    for model in args.models:
        for n in args.new_tokens:
            for _ in range(args.reps):
                for engine in ENGINES:
                    runs[(model, n, engine)].append(measure(engine, model, n, args.steps, args.dtype))
                    last = runs[(model, n, engine)][-1]
                    print(model, n, engine, round(last["eps"], 2), round(last["phases_s"]["generation"], 3), flush=True)
    lines = [f"RLOO, 8 prompts x 4 samples, exactly N new tokens, LoRA r=16, {args.dtype}; medians of "
             f"{args.reps} fresh processes per line, {args.steps} steps each after a warm-up step", "",
             "| model | new tokens | engine | episodes/s | vs hf | rollout phase s | rollout speed vs hf | "
             "weight sync s |", "|---|---|---|---|---|---|---|---|"]
    for model in args.models:
        for n in args.new_tokens:
            hf = runs[(model, n, "hf")]
            for engine in ENGINES:
                rs = runs[(model, n, engine)]
                eps, rollout = median(rs, lambda r: r["eps"]), median(rs, lambda r: r["phases_s"]["generation"])
                hf_eps, hf_rollout = median(hf, lambda r: r["eps"]), median(hf, lambda r: r["phases_s"]["generation"])
                sync = f"{median(rs, lambda r: r['weight_sync_s']):.3f}" if engine == "vllm" else "-"
                lines.append(f"| {model} | {n} | {engine} | {eps:.2f} | {eps / hf_eps:.2f}x | {rollout:.2f} | "
                             f"{hf_rollout / rollout:.2f}x | {sync} |")
    publish("rollout_engines", {f"{m} {n} {e}": r for (m, n, e), r in runs.items()}, lines, ["docs/rollout.md"])


if __name__ == "__main__":
    main()
