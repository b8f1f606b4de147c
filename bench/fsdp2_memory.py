"""trainer=fsdp2 against one process: per-rank memory of parameters, gradients and optimizer state, and step time.

    python bench/fsdp2_memory.py        # ~2 min on 2 CPU cores

Full fine-tuning (model.lora=null) of the pythia-160m shape (random weights, bench/workload.py), RLOO, 4 prompts x
4 samples per RL step, 16 new tokens, 4 RL steps, as `python train.py` runs it: trainer=cpu (1 process) and
trainer=fsdp2 on 2 CPU processes (gloo). Each rank counts the bytes of its own tensors at its last optimizer step
(parameters: the policy and the frozen reference copy; gradients; AdamW's state), its peak RSS, the median
seconds per RL step (time/step_s, steps 2..4) and the all-gather of the weights before each rollout
(time/gather_weights_s). Writes bench/results/fsdp2_memory.md and .json and the table into docs/scale.md.
On 2 CPU cores the 2 ranks share the cores one process had: the step times say what sharding costs here, not
what it gains on devices of their own.
"""

from __future__ import annotations

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
from results_blocks import publish
from workload import build_model, peak_rss_mib

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RUN = ["model.lora=null", "steps=4", "data.batch_size=4", "algo.response_length=16", "+trainer.limit_val_batches=0",
       "callbacks.evaluation=null", "callbacks.generation_samples=null", "callbacks.training_summary=null",
       "callbacks.curves=null", "callbacks.model_checkpoint=null"]
CASES = {"1 process (trainer=cpu)": ["trainer=cpu"],
         "2 ranks (trainer=fsdp2)": ["trainer=fsdp2", "trainer.accelerator=cpu", "trainer.devices=2"]}
MIB = 2**20


def local_bytes(tensors) -> int:
    """Bytes of this rank's tensors (a DTensor's local shard; a shard can be a view into a larger buffer, so its
    own elements are counted, not its storage)."""
    local = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]
    return sum(t.numel() * t.element_size() for t in local)


class StateBytes(L.Callback):
    """Per rank, at the last optimizer step: bytes of parameters, gradients and optimizer state, and peak RSS."""

    def __init__(self, path: str):
        self.path, self.measured = Path(path), {}

    def on_before_optimizer_step(self, trainer, module, optimizer) -> None:
        params = list(module.parameters())
        state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        self.measured = {"parameters": local_bytes(params) / MIB,
                         "gradients": local_bytes([p.grad for p in params if p.grad is not None]) / MIB,
                         "optimizer": local_bytes(state) / MIB}

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


def main() -> None:
    model = build_model("pythia-160m")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, overrides in CASES.items():
            results[name] = run(model, overrides, Path(tmp) / f"run{len(results)}")
    lines = ["| run | parameters (MiB/rank) | gradients | AdamW state | sum | peak RSS (MiB/rank) | s per RL step | "
             "weight all-gather (s/step) |", "|---|---|---|---|---|---|---|---|"]
    for name, result in results.items():
        rank = max(result["ranks"], key=lambda r: r["parameters"] + r["gradients"] + r["optimizer"])
        total = rank["parameters"] + rank["gradients"] + rank["optimizer"]
        rss = max(r["peak_rss"] for r in result["ranks"])
        gather = "-" if result["gather_weights_s"] is None else f"{result['gather_weights_s']:.2f}"
        lines.append(f"| {name} | {rank['parameters']:.0f} | {rank['gradients']:.0f} | {rank['optimizer']:.0f} | "
                     f"{total:.0f} | {rss:.0f} | {result['step_s']:.1f} | {gather} |")
    lines.append("")
    lines.append("pythia-160m shape, full fine-tuning, RLOO, 4 prompts x 4 samples, 16 new tokens, 2 CPU cores "
                 "(`python bench/fsdp2_memory.py`). Parameters include the frozen reference copy; the larger rank "
                 "is shown.")
    publish("fsdp2_memory", results, lines, ["docs/scale.md"])


if __name__ == "__main__":
    main()
