"""What rollout=vllm_server moves over the network per weight sync: the bytes of the file each server reads after an
RL step (rollout.weight_sync=merged: the trained tensors, LoRA merged into the layers it adapts; =adapter: the LoRA
adapter as peft saves it) and of the first sync (merged: every weight), for LoRA (r 16, all linear layers) and full
fine-tuning, at the embedded default's and the pythia-160m shape, float32 and bfloat16; with the seconds lit_rlhf
takes to compute and write it on this machine (the server's load is not in it: it runs on the server's machine).

    python bench/server_sync.py     # a minute on 2 CPU cores; writes bench/results/server_sync.{md,json}
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch
import workload as W
from command_line import takes_no_options
from floor import load_tokenizer_and_model
from results_blocks import publish
from safetensors.torch import save_file

from lit_rlhf.rollout.weights import every_weight, trained_weights

SHAPES = ("tiny", "pythia-160m")
REPS = 3


def mib(weights: dict[str, torch.Tensor]) -> float:
    return sum(t.numel() * t.element_size() for t in weights.values()) / 2**20


def write_merged(policy: torch.nn.Module, folder: Path) -> None:
    weights = {name: t.contiguous().cpu() for name, t in trained_weights(policy).items()}
    save_file(weights, str(folder / "sync.safetensors"))


def write_adapter(policy: torch.nn.Module, folder: Path) -> None:
    policy.save_pretrained(str(folder / "adapter"))


def write_seconds(write, policy: torch.nn.Module, folder: Path) -> float:
    """Median seconds to compute an RL step's sync file and write it (what the trainer does before the servers load)."""
    times = []
    for _ in range(REPS):
        start = time.perf_counter()
        write(policy, folder)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def adapter_mib(policy: torch.nn.Module, folder: Path) -> float:
    write_adapter(policy, folder)
    return sum(f.stat().st_size for f in (folder / "adapter").iterdir()) / 2**20


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for shape in SHAPES:
            for dtype in ("float32", "bfloat16"):
                for lora in (True, False):
                    _, policy = load_tokenizer_and_model(shape, dtype, torch.device("cpu"), lora=lora)
                    rows.append({"shape": shape, "dtype": dtype, "training": "LoRA" if lora else "full",
                                 "weight_sync": "merged", "step_mib": mib(trained_weights(policy)),
                                 "first_mib": mib(every_weight(policy)),
                                 "write_s": write_seconds(write_merged, policy, Path(folder))})
                    if lora:
                        size = adapter_mib(policy, Path(folder))
                        rows.append({**rows[-1], "weight_sync": "adapter", "step_mib": size, "first_mib": size,
                                     "write_s": write_seconds(write_adapter, policy, Path(folder))})
                    print(*rows[-1 - lora:], sep="\n", flush=True)
    lines = [f"rollout=vllm_server's weight sync: the file each server reads after an RL step, and the first sync's "
             f"(every weight, with rollout.weight_sync=merged); LoRA r={W.LORA['r']} on all linear layers, merged "
             f"into the layers (merged) or the adapter as peft saves it (adapter); the seconds to compute and write "
             f"the step's file on this machine (median of {REPS}); `python bench/server_sync.py`.", "",
             "| shape | dtype | training | rollout.weight_sync | MiB per RL step | MiB first sync | write s |",
             "|---|---|---|---|---:|---:|---:|"]
    lines += [f"| {r['shape']} | {r['dtype']} | {r['training']} | {r['weight_sync']} | {r['step_mib']:.2f} | "
              f"{r['first_mib']:.2f} | {r['write_s']:.3f} |" for r in rows]
    publish("server_sync", {"rows": rows}, lines, ["docs/scale.md"], fingerprint=False)


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
