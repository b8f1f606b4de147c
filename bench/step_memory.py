"""What the memory peak of an RL step holds, measured on a CPU: the live tensor bytes of bench/lit_step.py's RLOO step
and of the plain-PyTorch floor (bench/floor.py) at the GPU check's work (8 prompts x 4 samples, 32 forced new tokens,
LoRA, bfloat16 weights), by the operation that made each tensor.

    python bench/step_memory.py        # ~9 minutes on 2 CPU cores; writes bench/results/step_memory.{md,json}

Each row runs its script for 2 steps in a process of its own under torch.profiler (profile_memory=True: every
allocation and free of the CPU allocator, with the operations it happened in) and reports the most bytes live at once
outside sampling (the update's peak; the GPU check puts lit_rlhf's and the floor's peaks in the update and the
reference forward), with what was live then, grouped by the step's phase and the operation that allocated it; at
pythia-160m's shape every row, at pythia-1b's the floor and lit_rlhf's defaults. The
base model's weights are not counted (loaded memory-mapped, outside the allocator); on a GPU they add the same to
every row. Not counted either: the copy the CPU's batched matrix product makes of a broadcast operand (a GPU's batched
product reads it in place). TRL has no row: on a CPU its log-probabilities take another path than on a GPU.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import runpy
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
WORK = ["--dtype", "bfloat16", "--steps", "2", "--warmup", "0"]
ROWS = {"floor": ["floor.py"],
        "lit_rlhf": ["lit_step.py"],
        "lit_rlhf logits recomputed": ["lit_step.py", "--recompute-logits"],
        "lit_rlhf logits recomputed in chunks of 256": ["lit_step.py", "--recompute-logits", "--logits-chunk-size",
                                                        "256"],
        "lit_rlhf checkpointed": ["lit_step.py", "--gradient-checkpointing"]}
SHAPES = {"pythia-160m": list(ROWS), "pythia-1b": ["floor", "lit_rlhf"]}  # the rows measured at each model shape
SAMPLING = "sampling: generate()"


def traced(script: str, args: list[str]) -> dict:
    """Run bench/SCRIPT with args under the memory profiler. -> the peak outside sampling and what it held."""
    from torch.profiler import ProfilerActivity, profile, record_function
    from transformers import GenerationMixin

    sys.path.insert(0, str(BENCH))
    import workload as W

    timed_phase = W.PhaseTimer.__call__

    @contextlib.contextmanager
    def named_phase(self, phase):  # the phases of the step, as the scripts time them, named in the trace
        with record_function(f"phase: {phase}"), timed_phase(self, phase):
            yield

    W.PhaseTimer.__call__ = named_phase
    generate = GenerationMixin.generate

    @functools.wraps(generate)
    def marked_generate(model, *a, **k):
        with record_function(SAMPLING):
            return generate(model, *a, **k)

    GenerationMixin.generate = marked_generate
    sys.argv = [script, *args]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        runpy.run_path(str(BENCH / script), run_name="__main__")
    allocations, sampling = [], []

    def walk(node, parents: tuple[str, ...]) -> None:
        if node.name == SAMPLING:
            sampling.append((node.start_time_ns, node.end_time_ns))
        fields = node.extra_fields
        if type(fields).__name__ == "_ExtraFields_Allocation":
            if "aten::bmm" in parents and parents[parents.index("aten::bmm") + 1:][:1] == ("aten::contiguous",):
                return  # the CPU bmm kernel's copy of a broadcast operand
            allocations.append((node.start_time_ns, fields.ptr, fields.alloc_size, parents))
            return
        for child in node.children:
            walk(child, parents + (node.name,))

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root, ())
    allocations.sort(key=lambda a: a[0])
    first_sampling = min(start for start, _ in sampling)
    live, total, peak, at_peak, peak_made_by = {}, 0, 0, {}, ()
    for time, ptr, size, parents in allocations:
        if size > 0:
            live[ptr] = (size, parents)
            total += size
        elif ptr in live:
            total -= live.pop(ptr)[0]
        if time >= first_sampling and total > peak and not any(a <= time <= b for a, b in sampling):
            peak, at_peak, peak_made_by = total, dict(live), parents
    held = collections.Counter()
    for size, parents in at_peak.values():
        held[holder(parents)] += size
    return {"peak_mib": peak / 2**20, "peak_in": holder(peak_made_by)[0],
            "held_mib": [[phase, op, size / 2**20] for (phase, op), size in held.most_common()]}


def measured(shape: str, name: str) -> dict:
    """One row, traced in a process of its own."""
    script, *options = ROWS[name]
    run = subprocess.run([sys.executable, __file__, "--trace", script, "--model", shape, *WORK, *options],
                         capture_output=True, text=True, cwd=BENCH)
    lines = [line for line in run.stdout.splitlines() if line.startswith("STEP_MEMORY ")]
    if run.returncode or not lines:
        raise SystemExit(f"{shape} {name}: {script} failed:\n{run.stderr[-2000:]}")
    result = json.loads(lines[-1].removeprefix("STEP_MEMORY "))
    print(f"{shape} {name}: {result['peak_mib']:.0f} MiB", flush=True)
    return result


def holder(parents: tuple[str, ...]) -> tuple[str, str]:
    """(the step's phase, the operation) that made an allocation: the outermost aten operation of the innermost
    three, or the backward function it ran in."""
    phase = next((p.removeprefix("phase: ") for p in reversed(parents) if p.startswith("phase: ")), "outside")
    if phase == "outside" and any(p.startswith("Optimizer.") for p in parents):
        phase = "optimizer"
    backward = [p for p in parents if p.startswith("autograd::engine::evaluate_function: ")]
    if backward:
        return phase, "backward of " + backward[-1].split(": ", 1)[1].removesuffix("Backward0").removesuffix("Backward")
    ops = [p for p in parents if p.startswith("aten::")][-3:]
    return phase, ops[0] if ops else "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)  # one row, in this process
    args = parser.parse_args()
    if args.trace:
        result = traced(args.trace[0], args.trace[1:])
        print("STEP_MEMORY " + json.dumps(result), flush=True)
        return
    results = {shape: {name: measured(shape, name) for name in names} for shape, names in SHAPES.items()}
    lines = ["Live tensor memory at the peak of an RLOO step outside sampling, on a CPU (bfloat16 weights, LoRA r=16; "
             "8 prompts x 4 samples, 32 forced new tokens; the base model's weights not counted), and the largest "
             "things it held, by the phase and operation that made them; `python bench/step_memory.py`.", "",
             "| model | impl | peak MiB | peak in | largest holdings (MiB: phase, operation) |",
             "|---|---|---:|---|---|"]
    for shape, rows in results.items():
        for name, result in rows.items():
            largest = "; ".join(f"{mib:.0f}: {phase}, {op}" for phase, op, mib in result["held_mib"][:4])
            lines.append(f"| {shape} | {name} | {result['peak_mib']:.0f} | {result['peak_in']} | {largest} |")
    sys.path.insert(0, str(BENCH))
    from results_blocks import publish

    publish("step_memory", {"work": WORK, "shapes": results}, lines,
            ["docs/performance.md"], fingerprint=False)


if __name__ == "__main__":
    main()
