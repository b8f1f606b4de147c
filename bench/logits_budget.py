"""The update with its chunked logits kept (algo.logits_budget_mib, default) against recomputed in the backward pass
(logits_budget_mib=null), the same in chunks of 256 response tokens (what bounds the peak memory of the update), and
the plain-PyTorch floor.

    python bench/logits_budget.py        # ~15 min on 2 CPU cores; writes bench/results/logits_budget.{md,json}

bench/run.py's RLOO workload (8 prompts x 4, 32 forced new tokens, LoRA r=16, float32) on the pythia-160m shape:
32 x 32 response tokens x 50,304 vocabulary entries x 4 bytes = 196.5 MiB of float32 logits, under the 512 MiB
budget, so they are kept. Fresh processes, the four alternating in a rotating order; medians.
"""

from __future__ import annotations

import argparse
import statistics

from results_blocks import publish
from run import measure, median_of

SETTINGS = {"kept (default)": ("lit_step.py",),
            "recomputed (logits_budget_mib=null)": ("lit_step.py", "--recompute-logits"),
            # the whole update is one chunk of 1,024 tokens: smaller chunks bound the logits held in the backward
            "recomputed in chunks of 256 (+ logits_chunk_size=256)": ("lit_step.py", "--recompute-logits",
                                                                      "--logits-chunk-size", "256"),
            "floor": ("floor.py",)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="pythia-160m")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    runs = {name: [] for name in SETTINGS}
    names = list(SETTINGS)
    for rep in range(args.reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            script, *extra = SETTINGS[name]
            runs[name].append(measure(script, args.model, "float32", *extra))
            print(name, rep, round(runs[name][-1]["eps"], 3), flush=True)
    medians = {name: median_of(r) for name, r in runs.items()}
    floor = medians["floor"]
    lines = [f"{args.model} shape, RLOO, 8 prompts x 4, 32 forced new tokens, LoRA, float32, CPU; medians of "
             f"{args.reps} fresh processes each; `python bench/logits_budget.py`.", "",
             "| update logits | episodes/s | vs floor | step s | policy forward/backward s | peak RSS MiB |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, m in medians.items():
        lines.append(f"| {name} | {m['eps']:.2f} | {m['eps'] / floor['eps']:.2f}x | {m['step_s']:.2f} | "
                     f"{m['phases_s']['policy forward/backward']:.2f} | {m['peak_rss_mib']:.0f} |")
    spread = {name: [round(r["phases_s"].get("policy forward/backward", 0.0), 2) for r in rs]
              for name, rs in runs.items()}
    lines += ["", "Policy forward/backward seconds of each process: "
              + "; ".join(f"{name}: {', '.join(map(str, v))}" for name, v in spread.items()) + "."]
    data = {"model": args.model, "reps": args.reps,
            "medians": {n: {k: v for k, v in m.items() if k != "runs"} for n, m in medians.items()}, "runs": runs,
            "median_eps_ratio_kept_to_recomputed": statistics.median(
                a["eps"] for a in runs["kept (default)"]) / statistics.median(
                b["eps"] for b in runs["recomputed (logits_budget_mib=null)"])}
    publish("logits_budget", data, lines, ["docs/performance.md"])


if __name__ == "__main__":
    main()
