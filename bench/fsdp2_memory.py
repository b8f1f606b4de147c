"""trainer=fsdp2 against one process: per-rank memory (tensors and peak RSS), step and gather times, and the
memory model of bench/memory_model.py checked against what is measured.

    python bench/fsdp2_memory.py                  # ~30 min on 2 CPU cores
    python bench/fsdp2_memory.py pythia-160m      # one shape (prints its table, writes nothing)
    python bench/fsdp2_memory.py --table          # the table again from bench/results/fsdp2_memory.json (the
                                                  # measurements kept, the model's column recomputed)

Full fine-tuning (model.lora=null) of the pythia-160m and pythia-410m shapes (random weights, bench/workload.py),
RLOO, 4 prompts x 4 samples per RL step, 16 new tokens, 4 RL steps, as `python train.py` runs it: trainer=cpu
(1 process), and trainer=fsdp2 on 2 CPU processes (gloo) loading the whole model on every rank
(sharded_loading=false, as before sharded loading existed), loading sharded (the default), loading and
sampling sharded, and the latter with freed host tensors of 1 MiB and more handed back to the system at once
(trainer.strategy.host_mmap_threshold_mib=1). Each rank counts the bytes of its own tensors at its last optimizer
step (parameters: the policy and the frozen reference copy; gradients; AdamW's state), its RSS before the models
load (the process' fixed cost), its peak RSS once the models are loaded and at the end, the median seconds per RL
step (time/step_s, steps 2..4) and the all-gather of the weights before each rollout (time/gather_weights_s).
Writes bench/results/fsdp2_memory.md and .json and the table into docs/scale.md.
On 2 CPU cores the 2 ranks share the cores one process had: the step times say what sharding costs here, not
what it gains on devices of their own.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import lightning as L
import torch
from memory_model import CONFIGS, ModelShape, Workload, per_rank_bytes
from results_blocks import publish
from workload import build_model, peak_rss_mib

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PROMPTS, K, NEW_TOKENS = 4, 4, 16
PROMPT_TOKENS = 8  # about the widest bundled sentiment prompt, in tokens (for the KV cache term; a small one here)
RUN = ["model.lora=null", "steps=4", f"data.batch_size={PROMPTS}", f"algo.rloo_k={K}",
       f"algo.response_length={NEW_TOKENS}", "+trainer.limit_val_batches=0",
       "callbacks.evaluation=null", "callbacks.generation_samples=null", "callbacks.training_summary=null",
       "callbacks.curves=null", "callbacks.model_checkpoint=null"]
FSDP2 = ["trainer=fsdp2", "trainer.accelerator=cpu", "trainer.devices=2"]
CASES = {"1 process (trainer=cpu)": ["trainer=cpu"],
         "2 ranks, whole loading, gathered sampling": [*FSDP2, "trainer.strategy.sharded_loading=false"],
         "2 ranks, sharded loading, gathered sampling": FSDP2,
         "2 ranks, sharded loading, sharded sampling": [*FSDP2, "trainer.strategy.sharded_sampling=true"],
         "2 ranks, sharded loading, sharded sampling, 1 MiB mmap threshold":
             [*FSDP2, "trainer.strategy.sharded_sampling=true", "trainer.strategy.host_mmap_threshold_mib=1"]}
SHAPES = ("pythia-160m", "pythia-410m")
MIB = 2**20


def local_bytes(tensors) -> int:
    """Bytes of this rank's tensors (a DTensor's local shard; a shard can be a view into a larger buffer, so its
    own elements are counted, not its storage)."""
    local = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]
    return sum(t.numel() * t.element_size() for t in local)


def current_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class StateBytes(L.Callback):
    """Per rank: RSS before the models load, peak RSS after loading and at the end, and at the last optimizer step
    the bytes of parameters, gradients and optimizer state."""

    def __init__(self, path: str):
        self.path, self.measured = Path(path), {}

    def setup(self, trainer, module, stage) -> None:  # before configure_model: no weights yet
        self.measured["rss_before_models"] = current_rss_mib()

    def on_fit_start(self, trainer, module) -> None:
        self.measured["peak_rss_loaded"] = peak_rss_mib()

    def on_before_optimizer_step(self, trainer, module, optimizer) -> None:
        params = list(module.parameters())
        state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        self.measured.update(parameters=local_bytes(params) / MIB,
                             gradients=local_bytes([p.grad for p in params if p.grad is not None]) / MIB,
                             optimizer=local_bytes(state) / MIB)

    def on_fit_end(self, trainer, module) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        result = {**self.measured, "peak_rss": peak_rss_mib(), "world_size": trainer.world_size}
        (self.path / f"rank{trainer.global_rank}.json").write_text(json.dumps(result))


def run(model: Path, overrides: list[str], out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{BENCH}{os.pathsep}{ROOT}", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={out}", f"model.name_or_path={model}", *RUN,
               *overrides, "+callbacks.state_bytes._target_=fsdp2_memory.StateBytes",
               f"+callbacks.state_bytes.path={out}/state_bytes"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode:
        sys.exit(result.stderr[-3000:])
    with open(out / "csv" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("time/step_s")]
    ranks = [json.loads(p.read_text()) for p in sorted((out / "state_bytes").glob("rank*.json"))]
    gather = [float(r["time/gather_weights_s"]) for r in rows[1:] if r.get("time/gather_weights_s")]
    return {"ranks": ranks, "step_s": statistics.median(float(r["time/step_s"]) for r in rows[1:]),
            "gather_weights_s": statistics.median(gather) if gather else None}


def predicted_peak_mib(shape: str, name: str, rank: dict) -> float:
    """The memory model's peak for this run, on top of the rank's measured RSS before its models loaded."""
    ranks = rank["world_size"]
    work = Workload(sequences=PROMPTS * K // ranks, prompt_tokens=PROMPT_TOKENS, response_tokens=NEW_TOKENS,
                    micro_batch=PROMPTS * K // ranks)
    terms = per_rank_bytes(ModelShape.of(shape, CONFIGS[shape]()), ranks, lora=False, offload=False,
                           sharded_sampling="sharded sampling" in name, work=work, fsdp=ranks > 1)
    return rank["rss_before_models"] + terms["peak"] / MIB


def measure(shapes: tuple[str, ...]) -> dict:
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            model = build_model(shape)
            for name, overrides in CASES.items():
                print(f"{shape}: {name}", flush=True)
                results[f"{shape}: {name}"] = run(model, overrides, Path(tmp) / f"run{len(results)}")
    return results


def main(shapes: tuple[str, ...] = SHAPES, results: dict | None = None) -> None:
    results = results or measure(shapes)
    lines = ["| shape | run | parameters (MiB/rank) | gradients | AdamW state | RSS before loading | peak RSS loaded | "
             "peak RSS | vs 1 process | model's peak | model / measured | s per RL step | all-gather (s/step) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, result in results.items():
        shape, name = key.split(": ", 1)
        rank = max(result["ranks"], key=lambda r: r["peak_rss"])  # the larger rank
        single = max(r["peak_rss"] for r in results[f"{shape}: 1 process (trainer=cpu)"]["ranks"])
        predicted = predicted_peak_mib(shape, name, rank)
        result["predicted_peak_rss"] = predicted
        gather = "-" if result["gather_weights_s"] is None else f"{result['gather_weights_s']:.2f}"
        lines.append(f"| {shape} | {name} | {rank['parameters']:.0f} | {rank['gradients']:.0f} | "
                     f"{rank['optimizer']:.0f} | {rank['rss_before_models']:.0f} | {rank['peak_rss_loaded']:.0f} | "
                     f"{rank['peak_rss']:.0f} | {rank['peak_rss'] / single:.2f}x | {predicted:.0f} | "
                     f"{predicted / rank['peak_rss']:.2f} | {result['step_s']:.1f} | {gather} |")
    lines.append("")
    lines.append(f"Full fine-tuning, RLOO, {PROMPTS} prompts x {K} samples, {NEW_TOKENS} new tokens, 2 CPU cores "
                 f"(`python bench/fsdp2_memory.py`). MiB per rank, the rank with the larger peak shown. Parameters "
                 f"include the frozen reference copy. Model's peak: the RSS before loading plus the formulas of "
                 f"bench/memory_model.py for this run.")
    if shapes != SHAPES:
        print("\n".join(lines))
        return
    publish("fsdp2_memory", results, lines, ["docs/scale.md"])


def command_line() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", nargs="*", metavar="SHAPE", help=f"one of {', '.join(SHAPES)} (default: all)")
    parser.add_argument("--table", action="store_true", help="the table again from bench/results/fsdp2_memory.json")
    args = parser.parse_args()
    unknown = [shape for shape in args.shapes if shape not in SHAPES]
    if unknown:
        parser.error(f"{unknown[0]!r} is not a measured shape; choose from {', '.join(SHAPES)}")
    if args.table and args.shapes:
        parser.error("--table rewrites the table of every shape from the results file; give it no shape")
    return args


if __name__ == "__main__":
    args = command_line()
    if args.table:
        saved = json.loads((BENCH / "results" / "fsdp2_memory.json").read_text())
        main(results={key: value for key, value in saved.items() if key != "machine"})
    else:
        main(tuple(args.shapes) or SHAPES)
