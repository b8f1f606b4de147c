"""GRPO against TRL's GRPOTrainer and the plain-PyTorch floor, on the same work.

    make setup-trl                     # once: TRL 1.16 in .venv-trl (bench only, not a dependency of lit_rlhf)
    python bench/grpo_vs_trl.py        # 1 to 2 hours on 2 CPU cores; writes bench/results/grpo_vs_trl.{json,md}
    python bench/grpo_vs_trl.py --models tiny --new-tokens 32 --merge   # those lines again, the others kept

Work (bench/workload.py): 8 prompts x 4 generations per step, dapo loss, one update per generation, AdamW,
clipping, VADER reward, float32; lit_rlhf's GRPOModule under a Lightning Trainer (bench/lit_step.py --algo grpo;
"lit_rlhf compiled": with rollout.compile_mode=default, its decoding step compiled in the warm-up steps), the
floor (bench/grpo_floor.py) and TRL 1.16's GRPOTrainer (bench/trl_step.py, in .venv-trl). Each measurement is a
fresh process (warm-up steps dropped); the implementations alternate in a rotating order, --reps times per
configuration, and the table gives medians with the ratios to the floor and to TRL measured in the same run.
Configurations (--full-matrix: every combination on every model):
- tiny (the embedded default): 32 and 128 forced new tokens x beta 0.04 and 0 x LoRA and full fine-tuning;
- tiny-50k (the tiny model's layers, pythia's 50k vocabulary; random weights): 32 forced tokens x beta 0.04 and 0 x
  LoRA and full;
- pythia-160m shape (random weights): 32 forced tokens, beta 0.04, LoRA and full; 128 forced tokens, LoRA;
- pythia-160m-stops (mixed response lengths, no forced length): 128 new tokens at most, beta 0.04, LoRA.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import workload as W
from results_blocks import publish

BENCH = Path(__file__).resolve().parent
TRL_PYTHON = BENCH.parent / ".venv-trl" / "bin" / "python"
LIT = [sys.executable, "lit_step.py", "--algo", "grpo"]
IMPLS = {"lit_rlhf": LIT, "lit_rlhf compiled": [*LIT, "--compile-mode", "default"],
         "floor": [sys.executable, "grpo_floor.py"], "trl": [str(TRL_PYTHON), "trl_step.py"]}
LIT_IMPLS = ("lit_rlhf", "lit_rlhf compiled")  # the default HFEngine, and with rollout.compile_mode=default
# (measured, warm-up) steps per process
STEPS = {"tiny": (5, 2), "tiny-50k": (5, 2), "pythia-160m": (1, 1), "pythia-160m-stops": (1, 1)}


def configurations(full_matrix: bool) -> list[dict]:
    """(model, new tokens, mixed lengths, beta, full fine-tuning) of each measured configuration."""
    def grid(model, tokens, betas, fulls, mixed=False):
        return [dict(model=model, new_tokens=n, mixed=mixed, beta=b, full=f)
                for n, b, f in itertools.product(tokens, betas, fulls)]
    if full_matrix:
        return [c for m in STEPS for c in grid(m, (32, 128), (0.04, 0.0), (False, True), m.endswith("-stops"))]
    return (grid("tiny", (32, 128), (0.04, 0.0), (False, True)) + grid("tiny-50k", (32,), (0.04, 0.0), (False, True))
            + grid("pythia-160m", (32,), (0.04,), (False, True)) + grid("pythia-160m", (128,), (0.04,), (False,))
            + grid("pythia-160m-stops", (128,), (0.04,), (False,), mixed=True))


def measure(impl: str, config: dict) -> dict:
    steps, warmup = STEPS[config["model"]]
    command = [*IMPLS[impl], "--model", config["model"], "--new-tokens", str(config["new_tokens"]), "--beta",
               str(config["beta"]), "--steps", str(steps), "--warmup", str(warmup)]
    command += ["--full"] * config["full"] + ["--mixed"] * config["mixed"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=BENCH)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict:
    return {"eps": statistics.median(r["eps"] for r in runs), "step_s": statistics.median(r["step_s"] for r in runs),
            "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in runs),
            "generation_s": statistics.median(r["phases_s"].get("generation", 0.0) for r in runs), "runs": runs}


def markdown(results: dict) -> list[str]:
    lines = [f"GRPO (dapo), 8 prompts x 4 generations per step, float32, {results['device']}; medians of "
             f"{process_counts(results)} fresh processes per line (the implementations alternating); TRL "
             f"{results['trl_version']}. \"rest\" is the step without generate(): reward, logprob forwards, "
             "backward, optimizer, framework. \"lit_rlhf compiled\": rollout.compile_mode=default (the decoding "
             "step compiled over a static KV cache; compiled in the warm-up steps).", "",
             "| model | new tokens | tuning | beta | impl | episodes/s | vs floor | vs TRL | peak RSS MiB | vs floor "
             "| vs TRL | step s | generation s | rest s |", "|---" * 14 + "|"]
    for entry in results["configurations"]:
        c, by_impl = entry["config"], entry["impls"]
        floor, trl = by_impl["floor"], by_impl["trl"]
        for impl, r in by_impl.items():
            lines.append(f"| {c['model']} | {tokens_label(c)} | {'full' if c['full'] else 'LoRA'} | {c['beta']:g} | "
                         f"{impl} | {r['eps']:.2f} | {r['eps'] / floor['eps']:.2f}x | {r['eps'] / trl['eps']:.2f}x | "
                         f"{r['peak_rss_mib']:.0f} | {r['peak_rss_mib'] / floor['peak_rss_mib']:.2f}x | "
                         f"{r['peak_rss_mib'] / trl['peak_rss_mib']:.2f}x | {r['step_s']:.3f} | "
                         f"{r['generation_s']:.3f} | {r['step_s'] - r['generation_s']:.3f} |")
    return lines + ["", "lit_rlhf's episodes/s against TRL's and the floor's, and its peak RSS against TRL's, over the "
                    "configurations above (lowest to highest):", ""] + ratio_ranges(results) + [
        "", "Where the step goes in lit_rlhf and the floor (medians, seconds; TRL's step is timed whole):", ""
    ] + phase_table(results)


def process_counts(results: dict) -> str:
    """'2', or where --merge joined runs of different --reps: '2 (3 for tiny at 32 tokens)'."""
    counts = {}  # (model, new tokens) -> processes per line
    for entry in results["configurations"]:
        c = entry["config"]
        counts[c["model"], tokens_label(c)] = max(len(r["runs"]) for r in entry["impls"].values())
    usual = statistics.mode(counts.values())
    others = {n: [f"{model} at {tokens} tokens" for (model, tokens), k in counts.items() if k == n]
              for n in sorted(set(counts.values()) - {usual})}
    return str(usual) + "".join(f" ({n} for {', '.join(where)})" for n, where in others.items())


PHASES = ("generation", "policy forward/backward", "reference forward", "reward", "optimizer", "other")


def phase_table(results: dict) -> list[str]:
    lines = ["| model | new tokens | tuning | beta | impl | " + " | ".join(PHASES) + " |",
             "|---" * (5 + len(PHASES)) + "|"]
    for entry in results["configurations"]:
        c = entry["config"]
        for impl in (*LIT_IMPLS, "floor"):
            if impl not in entry["impls"]:
                continue
            runs = entry["impls"][impl]["runs"]
            cells = [f"{statistics.median(r['phases_s'].get(p, 0.0) for r in runs):.3f}" for p in PHASES]
            lines.append(f"| {c['model']} | {tokens_label(c)} | {'full' if c['full'] else 'LoRA'} | {c['beta']:g} | "
                         f"{impl} | " + " | ".join(cells) + " |")
    return lines


def tokens_label(config: dict) -> str:
    return f"{config['new_tokens']}{' (mixed)' if config['mixed'] else ''}"


def span(ratios: list[float]) -> str:
    low, high = min(ratios), max(ratios)
    return f"{low:.2f}x" if len(ratios) == 1 else f"{low:.2f}x to {high:.2f}x"


def ratio_ranges(results: dict) -> list[str]:
    """One line per (model, new tokens): the range of lit_rlhf's ratios over tuning and beta."""
    groups: dict[tuple, list[dict]] = {}
    for entry in results["configurations"]:
        groups.setdefault((entry["config"]["model"], tokens_label(entry["config"])), []).append(entry["impls"])
    lines = ["| model | new tokens | impl | configurations | episodes/s vs TRL | episodes/s vs floor "
             "| peak RSS vs TRL |", "|---" * 7 + "|"]
    for (model, tokens), entries in groups.items():
        for impl in LIT_IMPLS:
            measured = [e for e in entries if impl in e]
            if not measured:
                continue
            eps_trl = span([e[impl]["eps"] / e["trl"]["eps"] for e in measured])
            eps_floor = span([e[impl]["eps"] / e["floor"]["eps"] for e in measured])
            rss_trl = span([e[impl]["peak_rss_mib"] / e["trl"]["peak_rss_mib"] for e in measured])
            lines.append(f"| {model} | {tokens} | {impl} | {len(measured)} | {eps_trl} | {eps_floor} | {rss_trl} |")
    return lines


def merged(previous: dict, new: dict) -> dict:
    """previous's configurations, those measured again replaced in place by new's."""
    fresh = {json.dumps(e["config"], sort_keys=True): e for e in new["configurations"]}
    kept = [fresh.pop(json.dumps(e["config"], sort_keys=True), e) for e in previous["configurations"]]
    return {**previous, "trl_version": new["trl_version"], "configurations": kept + list(fresh.values()),
            "wall_s": previous.get("wall_s", 0.0) + new["wall_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--full-matrix", action="store_true")
    parser.add_argument("--models", nargs="*", default=None, help="only these models")
    parser.add_argument("--new-tokens", type=int, nargs="*", default=None, help="only these response lengths")
    parser.add_argument("--merge", action="store_true",
                        help="replace only the measured configurations in bench/results/grpo_vs_trl.json, keeping "
                             "the others (each configuration's lines come from one run)")
    parser.add_argument("--markdown-only", action="store_true",
                        help="write the tables again from bench/results/grpo_vs_trl.json, measuring nothing")
    args = parser.parse_args()
    if args.markdown_only:
        results = json.loads((BENCH / "results" / "grpo_vs_trl.json").read_text())
        return publish("grpo_vs_trl", results, markdown(results), ["docs/performance.md"])
    if not TRL_PYTHON.exists():
        raise SystemExit(f"{TRL_PYTHON} does not exist; run `make setup-trl` first (TRL in a bench-only environment).")
    trl_version = subprocess.run([str(TRL_PYTHON), "-c", "import trl; print(trl.__version__)"], capture_output=True,
                                 text=True, check=True).stdout.strip()
    started, results = time.time(), {"device": "CPU", "reps": args.reps, "trl_version": trl_version,
                                     "configurations": []}
    for config in configurations(args.full_matrix):
        if (args.models and config["model"] not in args.models
                or args.new_tokens and config["new_tokens"] not in args.new_tokens):
            continue
        W.model_path(config["model"])  # build a random-weight model once, outside the timing
        runs = {impl: [] for impl in IMPLS}
        names = list(IMPLS)
        for rep in range(args.reps):
            for impl in names[rep % len(names):] + names[:rep % len(names)]:  # rotate the order: no position bias
                runs[impl].append(measure(impl, config))
                print(config, impl, f"{runs[impl][-1]['eps']:.2f} episodes/s", flush=True)
        results["configurations"].append({"config": config, "impls": {i: summary(r) for i, r in runs.items()}})
    results["wall_s"] = time.time() - started
    if args.merge:
        results = merged(json.loads((BENCH / "results" / "grpo_vs_trl.json").read_text()), results)
    publish("grpo_vs_trl", results, markdown(results), ["docs/performance.md"])
    print(f"{results['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
