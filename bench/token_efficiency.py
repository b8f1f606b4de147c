"""Token efficiency on the training side: lit_rlhf with chunked logprobs and padding-free forwards (the defaults)
against the same module on the padded full-logits path (`--padded`: logits_chunk_size=null, padding_free=false)
and against the plain-PyTorch floor (bench/floor.py), on the pythia-160m shape with mixed response lengths
(`pythia-160m-stops`, bench/workload.py) at 32 and 256 new tokens.

    python bench/token_efficiency.py          # ~20 minutes on 2 CPU cores; writes bench/results/token_efficiency.md and
                                              # its block in docs/performance.md

Each measurement is a fresh process (1 warm-up step dropped, then --steps steps); the three implementations
alternate, --reps times, and the table gives medians: episodes/s and peak memory (RSS on CPU), with their
ratios to the floor's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from fingerprint import record
from results_blocks import fill_results

BENCH = Path(__file__).resolve().parent
IMPLS = {"floor": ["floor.py"], "lit_rlhf padded (before)": ["lit_step.py", "--padded"],
         "lit_rlhf (chunked, padding-free)": ["lit_step.py"]}


def measure(script: list[str], model: str, new_tokens: int, steps: int) -> dict:
    out = subprocess.run([sys.executable, *script, "--model", model, "--new-tokens", str(new_tokens), "--mixed",
                          "--steps", str(steps), "--warmup", "1"], cwd=BENCH, check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="pythia-160m-stops")
    parser.add_argument("--new-tokens", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()
    runs = {(n, impl): [] for n in args.new_tokens for impl in IMPLS}
    for n in args.new_tokens:
        for _ in range(args.reps):
            for impl, script in IMPLS.items():
                runs[(n, impl)].append(measure(script, args.model, n, args.steps))
                print(n, impl, runs[(n, impl)][-1]["eps"], runs[(n, impl)][-1].get("peak_rss_mib"), flush=True)
    lines = [f"{args.model}, mixed response lengths, 8 prompts x 4 samples, LoRA r=16, float32, CPU; medians of "
             f"{args.reps} fresh processes per line", "",
             "| new tokens | impl | episodes/s | vs floor | peak memory MiB | vs floor | response tokens per step | "
             "policy forward/backward s | reference forward s | generation s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for n in args.new_tokens:
        floor = {k: statistics.median(r[k] for r in runs[(n, "floor")]) for k in ("eps", "peak_rss_mib")}
        for impl in IMPLS:
            rs = runs[(n, impl)]
            eps, peak = statistics.median(r["eps"] for r in rs), statistics.median(r["peak_rss_mib"] for r in rs)
            tokens = statistics.median(r["tokens_per_s"] * r["step_s"] for r in rs)
            phase = {k: statistics.median(r["phases_s"].get(k, 0.0) for r in rs)
                     for k in ("policy forward/backward", "reference forward", "generation")}
            lines.append(f"| {n} | {impl} | {eps:.2f} | {eps / floor['eps']:.2f}x | {peak:.0f} | "
                         f"{peak / floor['peak_rss_mib']:.2f}x | {tokens:.0f} | "
                         f"{phase['policy forward/backward']:.1f} | {phase['reference forward']:.1f} | "
                         f"{phase['generation']:.1f} |")
    (BENCH / "results" / "token_efficiency.md").write_text("\n".join(lines) + "\n")
    (BENCH / "results" / "token_efficiency.json").write_text(json.dumps({f"{n} {i}": r for (n, i), r in runs.items()},
                                                                        indent=1))
    fill_results("token_efficiency", ["docs/performance.md"])
    record("token_efficiency")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
