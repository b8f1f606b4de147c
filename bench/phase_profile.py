"""Where each phase of a benchmark step goes: the work launched (aten ops, device kernels and their device time),
the Python calls, beside the phase's wall time; to say whether a phase that is slower than the floor's is slower
on the device (more or longer kernels) or on the host (Python and launches).

    python bench/phase_profile.py                   # tiny model on this machine's device; ~1 min on 2 CPU cores
    python bench/phase_profile.py --model pythia-160m --dtype bfloat16 --impls floor "lit_rlhf eager"   # on a GPU

Writes bench/results/phase_profile_<cpu|cuda>.{md,json} and the docs' block of it (--out: those files elsewhere).
Each implementation (bench/gpu_extended.py's names, RLOO unless --algo) runs in a process of its own: --warmup
steps, then one step under torch.profiler (ops and kernels, attributed to the phase open when their op started, on
any thread: the backward runs on autograd's), one step whose Python calls are counted (sys.setprofile), then --steps
plain steps, whose median gives the wall times (and one more, whose start ends the last). A step runs from one
step's phase timer to the next (the floor's loop, Lightning's work between steps in lit_rlhf). "other" is the step
outside the timed phases.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

THIS = Path(__file__).resolve()
BENCH = THIS.parent
ROOT = BENCH.parent
OUT = BENCH / "results"
TOP_OPS = 4  # the costliest ops named per phase
# Host waits: on a GPU, the copies to the host (item(), float(), bool(), .tolist(), .cpu() of a device tensor, and the
# size that nonzero and boolean-mask indexing read back), after each of which the host has waited for the device to
# finish what it was given; on a CPU, the ops that would be such a wait were their tensors on a GPU (an upper bound:
# some, as the optimizer's step counters, stay on the host there; .tolist() and .cpu() are no ops on a CPU).
WAITING_OPS = ("aten::_local_scalar_dense", "aten::nonzero")


class StepProbe:
    """Watches a benchmark script's steps through bench/workload.py's PhaseTimer (one per step) and its phases."""

    def __init__(self, warmup: int, device_kind: str, timers_before_steps: int):
        import torch
        import workload as W

        self.W, self.torch, self.device_kind = W, torch, device_kind
        self.warmup = warmup + timers_before_steps  # index of the first measured step's timer
        self.step, self.starts, self.timers = -1, [], []
        self.profiler, self.events, self.calls = None, None, Counter()
        self.callers, self.files = defaultdict(Counter), {}
        self.patch_phase_timer()

    def phase(self) -> str:
        return self.W.OPEN_PHASES[-1] if self.W.OPEN_PHASES else "other"

    def patch_phase_timer(self) -> None:
        probe, timer_class = self, self.W.PhaseTimer
        original_init, original_call = timer_class.__init__, timer_class.__call__

        def init(timer, device):
            original_init(timer, device)
            probe.next_step(timer)

        def call(timer, phase):
            cm = original_call(timer, phase)
            if probe.profiler is None:
                return cm
            return probe.ranged(cm, phase)

        timer_class.__init__, timer_class.__call__ = init, call

    def ranged(self, cm, phase):
        from contextlib import ExitStack

        stack = ExitStack()
        stack.enter_context(cm)
        stack.enter_context(self.torch.profiler.record_function(f"phase:{phase}"))
        return stack

    def next_step(self, timer) -> None:
        """A step ends where the next one's timer is made."""
        self.W.sync(self.torch.device(self.device_kind))
        self.step += 1
        self.starts.append(time.perf_counter())
        self.timers.append(timer)
        if self.profiler is not None:
            self.profiler.stop()
            self.events, self.profiler = self.profiler.events(), None
        sys.setprofile(None)
        if self.step == self.warmup:
            activities = [self.torch.profiler.ProfilerActivity.CPU]
            if self.device_kind == "cuda":
                activities.append(self.torch.profiler.ProfilerActivity.CUDA)
            self.profiler = self.torch.profiler.profile(activities=activities)
            self.profiler.start()
        elif self.step == self.warmup + 1:
            sys.setprofile(self.count_call)

    def count_call(self, frame, event, arg) -> None:
        """A call of a Python or built-in function, counted to the phase and to the repository's function that made
        it: the innermost frame of lit_rlhf or bench/ on the stack (the called function itself if it is one)."""
        if event not in ("call", "c_call"):
            return
        phase = self.phase()
        self.calls[phase] += 1
        while frame is not None and not self.ours(frame.f_code):
            frame = frame.f_back
        code = frame.f_code if frame is not None else None
        self.callers[phase][f"{self.ours(code)}:{code.co_name}" if code else "outside the repository"] += 1

    def ours(self, code) -> str:
        """A code object's file relative to the repository when it is the repository's, else ""."""
        if code not in self.files:
            path = code.co_filename
            real = os.path.isabs(path) or os.path.exists(path)  # not "<string>", "<frozen abc>"
            path = os.path.abspath(path)
            inside = real and path.startswith(str(ROOT) + "/") and "/site-packages/" not in path and path != str(THIS)
            self.files[code] = path.removeprefix(str(ROOT) + "/") if inside else ""
        return self.files[code]

    def hook_optimizer_phase(self) -> None:
        """lit_rlhf's optimizer step is timed by hooks on the torch optimizer (bench/lit_step.py): open its phase."""
        import lit_step

        probe, starts, ends = self, lit_step.StepTimer._optimizer_step_starts, lit_step.StepTimer._optimizer_step_ends
        ranges = []

        def opened(step_timer):
            starts(step_timer)
            probe.W.OPEN_PHASES.append("optimizer")
            if probe.profiler is not None:
                ranges.append(probe.torch.profiler.record_function("phase:optimizer").__enter__())

        def closed(step_timer):
            ends(step_timer)
            probe.W.OPEN_PHASES.pop()
            if ranges:
                ranges.pop().__exit__(None, None, None)

        lit_step.StepTimer._optimizer_step_starts, lit_step.StepTimer._optimizer_step_ends = opened, closed

    def summary(self) -> dict:
        """Per phase: wall ms (median of the plain steps), ops, kernels, device ms, Python calls, top device ops."""
        plain = range(self.warmup + 2, len(self.starts) - 1)  # a step ends where the next one's timer is made
        walls = defaultdict(list)
        for i in plain:
            seconds = dict(self.timers[i].seconds)
            seconds["other"] = self.starts[i + 1] - self.starts[i] - sum(seconds.values())
            for phase, s in seconds.items():
                walls[phase].append(s)
        phases = {phase: {"wall_ms": 1000 * statistics.median(s)} for phase, s in walls.items()}
        for phase, counts in attribute(self.events or []).items():
            phases.setdefault(phase, {}).update(counts)
        for phase, calls in self.calls.items():
            callers = [[name, n] for name, n in self.callers[phase].most_common(3)]
            phases.setdefault(phase, {}).update(python_calls=calls, callers=callers)
        return {"steps": len(plain), "phases": phases}


def outermost_op(e) -> str:
    """The name of the outermost aten op holding e (a kernel's launch, an op inside an op), or e's own name."""
    name = e.name
    while e.cpu_parent is not None:
        e = e.cpu_parent
        if e.name.startswith("aten::"):
            name = e.name
    return name


def host_waits(e, on_device: bool) -> int:
    """The host waits an op makes (see WAITING_OPS): its copies to the host on a GPU, whether it is one on a CPU."""
    if on_device:
        return sum("dtoh" in k.name.lower() for k in e.kernels)  # CUDA's "Memcpy DtoH (Device -> Pageable)"
    return int(e.name in WAITING_OPS)


def attribute(events) -> dict[str, dict]:
    """Ops (outermost aten ops), kernels, their device time and the ops costing the most, per phase: the phase
    whose range holds the op's start, innermost range first."""
    ranges = sorted(((e.time_range.start, e.time_range.end, e.name.removeprefix("phase:")) for e in events
                     if e.name.startswith("phase:")), key=lambda r: r[1] - r[0])

    def phase_at(t: float) -> str:
        return next((name for start, end, name in ranges if start <= t <= end), "other")

    on_device = any(e.kernels for e in events)  # a GPU: ops cost their kernels' time; a CPU: their own
    out = defaultdict(lambda: {"ops": 0, "kernels": 0, "device_ms": 0.0, "waits": 0, "top": Counter()})
    for e in events:
        if e.name.startswith("phase:") or e.device_type.name != "CPU":
            continue
        row = out[phase_at(e.time_range.start)]
        outermost = e.name.startswith("aten::") and not (e.cpu_parent and e.cpu_parent.name.startswith("aten::"))
        row["ops"] += outermost
        row["waits"] += host_waits(e, on_device)
        kernel_us = sum(k.duration for k in e.kernels)
        row["kernels"] += len(e.kernels)
        row["device_ms"] += kernel_us / 1000
        cost = kernel_us if on_device else e.cpu_time_total if outermost else 0
        if cost:
            row["top"][outermost_op(e)] += cost / 1000
    return {phase: {**row, "top": [[name, round(ms, 3)] for name, ms in row["top"].most_common(TOP_OPS)]}
            for phase, row in out.items()}


def run_one(impl: str, algo: str, model: str, dtype: str, warmup: int, steps: int, new_tokens: int) -> dict:
    """One implementation's profile, in this process."""
    import torch
    from gpu_extended import commands

    script, *extra = commands(algo, trl=None)[impl][1:]
    device_kind = "cuda" if torch.cuda.is_available() else "cpu"
    lit = script == "lit_step.py"
    probe = StepProbe(warmup, device_kind, timers_before_steps=1 if lit else 0)  # lit_step's StepTimer makes one
    if lit:
        probe.hook_optimizer_phase()
    sys.argv = [script, *extra, "--model", model, "--dtype", dtype, "--warmup", str(warmup),
                "--new-tokens", str(new_tokens), "--steps", str(steps + 3)]
    # + the profiled step, the counted step, and one whose start ends the last plain step
    module = __import__(script.removesuffix(".py"))
    stdout = sys.stdout
    sys.stdout = sys.stderr  # the script's own JSON line is not this tool's
    try:
        module.main()
    finally:
        sys.stdout = stdout
        sys.setprofile(None)
    return {"impl": impl, "algo": algo, "model": model, "dtype": dtype, "new_tokens": new_tokens,
            "device": device_kind, **({"gpu": gpu_and_versions()} if device_kind == "cuda" else {}),
            **probe.summary()}


def gpu_and_versions() -> str:
    """The GPU and the versions its figures depend on (a host-bound step moves with them), for the table's head."""
    import lightning
    import peft
    import torch
    import transformers

    return (f"{torch.cuda.get_device_name()}, torch {torch.__version__}, transformers {transformers.__version__}, "
            f"peft {peft.__version__}, lightning {lightning.__version__}")


def table(results: list[dict], command: str) -> str:
    head = results[0]
    where = head.get("gpu", head["device"])
    lines = [f"{head['model']}, {head['algo']}, {head['new_tokens']} new tokens, {head['dtype']} on {where}; "
             f"`{command}` (ms per step; wall: median of {head['steps']} plain steps; the rest from one profiled "
             f"step and one counted step)", "",
             "| impl | phase | wall ms | aten ops | kernels | device ms | host waits | Python calls | "
             "costliest ops (ms) | most Python calls made by |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in results:
        for phase, p in sorted(r["phases"].items(), key=lambda kv: -kv[1].get("wall_ms", 0.0)):
            top = ", ".join(f"{name} {ms:g}" for name, ms in p.get("top", []))
            callers = ", ".join(f"`{name}` {n}" for name, n in p.get("callers", []))
            lines.append(f"| {r['impl']} | {phase} | {p.get('wall_ms', 0.0):.1f} | {p.get('ops', 0)} | "
                         f"{p.get('kernels', 0)} | {p.get('device_ms', 0.0):.1f} | {p.get('waits', 0)} | "
                         f"{p.get('python_calls', 0)} | "
                         f"{top} | {callers} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impls", nargs="+", default=["floor", "lit_rlhf eager"])
    parser.add_argument("--algo", default="rloo", choices=["rloo", "grpo", "ppo"])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3, help="plain steps, for the wall times")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one impl, JSON on stdout
    args = parser.parse_args()
    if args.steps < 1:
        raise SystemExit(f"error: --steps {args.steps}: at least 1 plain step, for the wall times")
    sys.path.insert(0, str(BENCH))
    from gpu_extended import commands

    unknown = [impl for impl in args.impls if impl not in commands(args.algo, trl=None)]
    if unknown:
        raise SystemExit(f"error: --impls {unknown[0]!r} is not an implementation of {args.algo} here: pick from "
                         f"{', '.join(repr(name) for name in commands(args.algo, None))}")
    if args.one:
        print(json.dumps(run_one(args.impls[0], args.algo, args.model, args.dtype, args.warmup, args.steps,
                                 args.new_tokens)))
        return
    results = []
    for impl in args.impls:
        child = [sys.executable, str(THIS), "--one", "--impls", impl, "--algo", args.algo, "--model", args.model,
                 "--dtype", args.dtype, "--warmup", str(args.warmup), "--steps", str(args.steps),
                 "--new-tokens", str(args.new_tokens)]
        done = subprocess.run(child, stdout=subprocess.PIPE, text=True, cwd=BENCH)
        if done.returncode:
            raise SystemExit(f"error: {impl} failed (exit code {done.returncode}); its output is above")
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    name = f"phase_profile_{results[0]['device']}"
    lines = table(results, shlex.join(["python", "bench/phase_profile.py", *sys.argv[1:]])).splitlines()
    if args.out == OUT:  # the docs quote this machine's table (docs/performance.md)
        from results_blocks import publish

        # a device's figures are no CPU training's (tests/test_docs_results.py's NO_FINGERPRINT)
        publish(name, {"runs": results}, lines, ["docs/performance.md"], fingerprint=name == "phase_profile_cpu")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps({"runs": results}, indent=1) + "\n")
    (args.out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
