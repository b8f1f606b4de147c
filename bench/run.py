"""The benchmark: lit_rlhf against a plain PyTorch floor on a fixed RLOO workload, plus lit_rlhf's PPO.

    python bench/run.py                       # CPU: embedded default + pythia-160m shape, ~8 minutes on 2 cores
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
from fingerprint import record
from results_blocks import fill_results

BENCH = Path(__file__).resolve().parent
PHASES = ("generation", "policy forward/backward", "reference forward", "reward", "optimizer", "other")
# (steps measured, warm-up steps) per model: enough steps for a stable median, under 10 minutes on 2 cores
STEPS = {"tiny": (10, 2), "pythia-160m": (1, 1), "pythia-1b": (5, 2)}
REPS = {"tiny": 5, "pythia-160m": 3, "pythia-1b": 3}  # the tiny model's steps are short: noisier, so more
ABLATION_REPS = {"tiny": 3, "pythia-160m": 1, "pythia-1b": 1}


def measure(script: str, model: str, dtype: str, *extra: str) -> dict:
    steps, warmup = STEPS[model]
    command = [sys.executable, str(BENCH / script), "--model", model, "--steps", str(steps), "--warmup",
               str(warmup), "--dtype", dtype, *extra]
    result = subprocess.run(command, capture_output=True, text=True, cwd=BENCH.parent)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def median_of(runs: list[dict]) -> dict:
    keys = ("eps", "cpu_s_per_episode", "tokens_per_s", "step_s", "peak_rss_mib", "rss_after_imports_mib",
            "rss_before_steps_mib")
    out = {k: statistics.median(r[k] for r in runs) for k in keys}
    gpu = [r["peak_gpu_mib"] for r in runs if r["peak_gpu_mib"] is not None]
    out["peak_gpu_mib"] = statistics.median(gpu) if gpu else None
    out["phases_s"] = {p: statistics.median(r["phases_s"].get(p, 0.0) for r in runs) for p in PHASES}
    out["runs"] = runs
    return out


def markdown(results: dict) -> str:
    """Two tables: speed and memory against the floor, then where the step time goes."""
    names = {"lit_rlhf": "lit_rlhf RLOO", "floor": "floor RLOO", "lit_rlhf_ppo": "lit_rlhf PPO (4 epochs)",
             "lit_rlhf_no_single_update": "lit_rlhf RLOO, old-logprob forward kept"}
    speed = [f"Device: {results['device']}; medians of fresh processes (lit_rlhf and floor alternating); workload: "
             f"{W.PROMPTS_PER_STEP} prompts x K={W.SAMPLES_PER_PROMPT}, {W.NEW_TOKENS} new tokens, LoRA r=16, "
             f"{results['dtype']}.", "",
             "| model | impl | reps | episodes/s | vs floor | CPU s / episode | vs floor | tokens/s | peak memory MiB "
             "| vs floor | RSS after imports MiB | step memory MiB |", "|---" * 12 + "|"]
    phases = ["| model | impl | step s | " + " | ".join(f"{p} s" for p in PHASES) + " |",
              "|---" * (3 + len(PHASES)) + "|"]
    for model, entry in results["models"].items():
        floor = entry["floor"]
        gpu = floor["peak_gpu_mib"] is not None
        memory_key = "peak_gpu_mib" if gpu else "peak_rss_mib"
        for impl in ("lit_rlhf", "floor", "lit_rlhf_no_single_update", "lit_rlhf_ppo"):
            if impl not in entry:
                continue
            r = entry[impl]
            step_memory = "-" if gpu else f"{r['peak_rss_mib'] - r['rss_before_steps_mib']:.0f}"
            speed.append(
                f"| {model} | {names[impl]} | {len(r['runs'])} | {r['eps']:.1f} | "
                f"{r['eps'] / floor['eps']:.2f}x | {r['cpu_s_per_episode']:.3f} | "
                f"{floor['cpu_s_per_episode'] / r['cpu_s_per_episode']:.2f}x | {r['tokens_per_s']:.0f} | "
                f"{r[memory_key]:.0f} | {r[memory_key] / floor[memory_key]:.2f}x | {r['rss_after_imports_mib']:.0f} | "
                f"{step_memory} |")
            phases.append(f"| {model} | {names[impl]} | {r['step_s']:.3f} | "
                          + " | ".join(f"{r['phases_s'][p]:.3f}" for p in PHASES) + " |")
    return "\n".join(speed + [""] + phases) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["tiny", "pythia-160m"])
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default: REPS per model)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--ppo-models", nargs="*", default=["tiny"],
                        help="models that also run lit_rlhf's PPO workload (4 epochs: 4x the update time)")
    args = parser.parse_args()
    started = time.time()
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({platform.machine()})"
    results = {"device": device, "reps": args.reps, "dtype": args.dtype, "models": {}}
    for model in args.models:
        W.model_path(model)  # build a random-weight model once, outside the timed processes
        runs = {"lit_rlhf": [], "floor": []}
        for rep in range(args.reps or REPS[model]):
            order = ("lit_rlhf", "floor") if rep % 2 == 0 else ("floor", "lit_rlhf")  # alternate: no order bias
            for impl in order:
                runs[impl].append(measure("lit_step.py" if impl == "lit_rlhf" else "floor.py", model, args.dtype))
                print(f"{model} {impl} rep {rep}: {runs[impl][-1]['eps']:.2f} episodes/s", flush=True)
        entry = {impl: median_of(r) for impl, r in runs.items()}
        if model in args.ppo_models:
            entry["lit_rlhf_ppo"] = median_of([measure("lit_step.py", model, args.dtype, "--algo", "ppo")])
        # the single-update optimization, measured against the path before it, in the same run
        entry["lit_rlhf_no_single_update"] = median_of([measure("lit_step.py", model, args.dtype, "--no-single-update")
                                                        for _ in range(ABLATION_REPS[model])])
        entry["eps_ratio"] = entry["lit_rlhf"]["eps"] / entry["floor"]["eps"]
        entry["cpu_ratio"] = entry["floor"]["cpu_s_per_episode"] / entry["lit_rlhf"]["cpu_s_per_episode"]
        results["models"][model] = entry
    results["wall_s"] = time.time() - started
    out = BENCH / "results"
    out.mkdir(exist_ok=True)
    name = "gpu" if torch.cuda.is_available() else "cpu"
    (out / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    table = markdown(results)
    (out / f"{name}.md").write_text(table)
    if name == "cpu":  # the GPU's table is measured on the device, beside no training fingerprint of this machine
        fill_results(name, ["docs/performance.md"])
        record(name)
    print(table)
    print(f"{time.time() - started:.0f} s; wrote {out / name}.json and .md")


if __name__ == "__main__":
    main()
