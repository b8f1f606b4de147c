"""Two gloo ranks for a test: rank zero in the test's process, rank one spawned (one process start-up, not two)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.multiprocessing as mp


def run_two_ranks(worker: Callable[..., None], *args) -> None:
    """worker(rank, init_method, *args) on ranks 0 and 1. The worker must leave this process as it found it (its
    process group destroyed, what it patched put back); the random state is put back here."""
    from tests.distributed.test_fsdp2_train import free_port

    init_method = f"tcp://127.0.0.1:{free_port()}"
    other = mp.get_context("spawn").Process(target=worker, args=(1, init_method, *args), daemon=True)
    other.start()
    try:
        with torch.random.fork_rng(devices=[]):
            worker(0, init_method, *args)
    finally:
        other.join(timeout=300)
        if other.exitcode is None:
            other.kill()
    assert other.exitcode == 0, f"rank 1 ended with exit code {other.exitcode}"
