"""The benchmark: lit_rlhf against a plain PyTorch floor on a fixed RLOO workload, plus lit_rlhf's PPO.

    python bench/run.py                       # CPU: embedded default + pythia-160m shape, ~5 minutes on 2 cores
    python bench/run.py --models pythia-1b --dtype bfloat16      # the GPU path

Every measurement is a fresh process (bench/lit_step.py, bench/floor.py) with warm-up steps dropped;
lit_rlhf and the floor alternate, REPS times, and the medians are reported. Writes
bench/results/<device>.json and .md (episodes/s, generated tokens/s, peak memory, phase breakdown,
and the ratios to the floor).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import workload as W

BENCH = Path(__file__).resolve().parent
PHASES = ("generation", "policy forward/backward", "reference forward", "reward", "optimizer", "other")
# (steps measured, warm-up steps) per model: enough steps for a stable median, under 10 minutes on 2 cores
STEPS = {"tiny": (8, 2), "pythia-160m": (3, 1), "pythia-1b": (5, 2)}


def measure(script: str, model: str, dtype: str, algo: str | None = None) -> dict:
    steps, warmup = STEPS[model]
    command = [sys.executable, str(BENCH / script), "--model", model, "--steps", str(steps), "--warmup",
               str(warmup), "--dtype", dtype] + (["--algo", algo] if algo else [])
    result = subprocess.run(command, capture_output=True, text=True, cwd=BENCH.parent)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def median_of(runs: list[dict]) -> dict:
    keys = ("eps", "tokens_per_s", "step_s", "peak_rss_mib")
    out = {k: statistics.median(r[k] for r in runs) for k in keys}
    gpu = [r["peak_gpu_mib"] for r in runs if r["peak_gpu_mib"] is not None]
    out["peak_gpu_mib"] = statistics.median(gpu) if gpu else None
    out["phases_s"] = {p: statistics.median(r["phases_s"].get(p, 0.0) for r in runs) for p in PHASES}
    out["runs"] = runs
    return out


def markdown(results: dict) -> str:
    lines = [f"Device: {results['device']}; {results['reps']} repetitions, medians; workload: "
             f"{W.PROMPTS_PER_STEP} prompts x K={W.SAMPLES_PER_PROMPT}, {W.NEW_TOKENS} new tokens, LoRA r=16.", "",
             "| model | impl | episodes/s | ratio to floor | tokens/s | peak memory MiB | ratio to floor | "
             + " | ".join(f"{p} s" for p in PHASES) + " |",
             "|---" * (7 + len(PHASES)) + "|"]
    for model, entry in results["models"].items():
        floor = entry["floor"]
        memory_key = "peak_gpu_mib" if floor["peak_gpu_mib"] is not None else "peak_rss_mib"
        for impl in ("lit_rlhf", "floor", "lit_rlhf_ppo"):
            if impl not in entry:
                continue
            r = entry[impl]
            ratio = f"{r['eps'] / floor['eps']:.2f}x" if impl != "lit_rlhf_ppo" else "-"
            memory_ratio = f"{r[memory_key] / floor[memory_key]:.2f}x" if impl != "lit_rlhf_ppo" else "-"
            name = {"lit_rlhf": "lit_rlhf RLOO", "floor": "floor RLOO", "lit_rlhf_ppo": "lit_rlhf PPO (4 epochs)"}
            lines.append(f"| {model} | {name[impl]} | {r['eps']:.1f} | {ratio} | {r['tokens_per_s']:.0f} | "
                         f"{r[memory_key]:.0f} | {memory_ratio} | "
                         + " | ".join(f"{r['phases_s'][p]:.3f}" for p in PHASES) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["tiny", "pythia-160m"])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--no-ppo", action="store_true", help="skip lit_rlhf's PPO workload")
    args = parser.parse_args()
    started = time.time()
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({platform.machine()})"
    results = {"device": device, "reps": args.reps, "dtype": args.dtype, "models": {}}
    for model in args.models:
        W.model_path(model)  # build a random-weight model once, outside the timed processes
        runs = {"lit_rlhf": [], "floor": []}
        for rep in range(args.reps):
            order = ("lit_rlhf", "floor") if rep % 2 == 0 else ("floor", "lit_rlhf")  # alternate: no order bias
            for impl in order:
                runs[impl].append(measure("lit_step.py" if impl == "lit_rlhf" else "floor.py", model, args.dtype))
                print(f"{model} {impl} rep {rep}: {runs[impl][-1]['eps']:.2f} episodes/s", flush=True)
        entry = {impl: median_of(r) for impl, r in runs.items()}
        if not args.no_ppo:
            entry["lit_rlhf_ppo"] = median_of([measure("lit_step.py", model, args.dtype, "ppo")])
        entry["eps_ratio"] = entry["lit_rlhf"]["eps"] / entry["floor"]["eps"]
        results["models"][model] = entry
    results["wall_s"] = time.time() - started
    out = BENCH / "results"
    out.mkdir(exist_ok=True)
    name = "gpu" if torch.cuda.is_available() else "cpu"
    (out / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    table = markdown(results)
    (out / f"{name}.md").write_text(table)
    print(table)
    print(f"{time.time() - started:.0f} s; wrote {out / name}.json and .md")


if __name__ == "__main__":
    main()
