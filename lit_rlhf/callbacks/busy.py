"""BusyMachineCheck: one line when this run cannot have the CPU it asks for, with the fix.

Two causes make CPU training several times slower without a word: torch running more threads than the cores this
process may use (a container's CPU quota or a taskset smaller than the machine: torch counts the machine's cores),
and other processes holding the cores. The first is known at the start of fit; the second shows in the first RL step,
when this process got less than half the CPU time its threads asked for while the load average was above the cores.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.utilities import rank_zero_info

from lit_rlhf.callbacks.settings import check_flag


def usable_cpus() -> int:
    """The cores this process may run on: its affinity, capped by a cgroup v2 CPU quota where one is set."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cpus


def cpu_seconds() -> float:
    """CPU time of this process, all its threads."""
    return time.process_time()


def too_many_threads(threads: int, ranks_here: int, cpus: int) -> str | None:
    """The line for torch threads (of every rank on this machine) above the usable cores, else None."""
    if threads * ranks_here <= cpus:
        return None
    per_rank = max(1, cpus // ranks_here)
    ranks = f" in each of {ranks_here} ranks" if ranks_here > 1 else ""
    return (f"torch runs {threads} threads{ranks} but this process may use {cpus} CPU core(s), so the threads wait "
            f"for each other and every step runs slower; set OMP_NUM_THREADS={per_rank} before starting (or call "
            f"torch.set_num_threads({per_rank}) before training).")


def busy_cores(cpu_share: float, load: float, cpus: int) -> str | None:
    """The line for a first step that got less than half the CPU time it asked for on a machine whose load average
    is above its usable cores (other processes hold them), else None."""
    if cpu_share >= 0.5 or load <= cpus:
        return None
    return (f"this machine is busy: the load average is {load:.1f} on {cpus} usable CPU core(s) and this run got "
            f"{cpu_share:.0%} of the CPU time it asked for in its first RL step, so every step runs slower until the "
            f"other processes finish; stop them, or give each its own cores (OMP_NUM_THREADS, taskset).")


class BusyMachineCheck(L.Callback):
    """Says once, on rank zero of a CPU run, when its CPU is oversubscribed (see the module doc). Changes nothing in
    training."""

    def __init__(self, enabled: bool = True):
        check_flag("busy_machine.enabled", enabled)
        self.enabled = enabled
        self._start: tuple[float, float] | None = None

    def on_train_start(self, trainer: L.Trainer, module) -> None:
        if not self.enabled or not isinstance(trainer.accelerator, CPUAccelerator):  # an accelerator waits on its own
            return
        ranks_here = max(1, trainer.world_size // max(1, trainer.num_nodes))
        if trainer.is_global_zero and (line := too_many_threads(torch.get_num_threads(), ranks_here, usable_cpus())):
            rank_zero_info(line)
        self._start = time.perf_counter(), cpu_seconds()

    def on_train_batch_end(self, trainer: L.Trainer, module, *args) -> None:
        if self._start is None:
            return
        wall, cpu = time.perf_counter() - self._start[0], cpu_seconds() - self._start[1]
        self._start = None  # the first RL step only
        cpus = usable_cpus()
        asked = min(torch.get_num_threads(), cpus)
        if trainer.is_global_zero and wall > 0 and hasattr(os, "getloadavg"):
            if line := busy_cores(cpu / (wall * asked), os.getloadavg()[0], cpus):
                rank_zero_info(line)
