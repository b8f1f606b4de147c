"""A run that leaves its process group to the interpreter's finalization can end with SIGABRT after it finished: gloo's
worker threads hold work whose tensors reach back into Python once the interpreter is being torn down ("terminate
called without an active exception", exit code -6; torchrun then reports the node failed). Lightning destroys the
group at exit for NCCL only; the modules have it destroyed at exit for every backend, while the interpreter is whole."""

from __future__ import annotations

import atexit

import torch

_registered = False


def destroy_process_group_at_exit() -> None:
    """Registers, once per process, the destruction of the process groups at the interpreter's exit (a no-op then if
    none is left)."""
    global _registered
    if not _registered:
        atexit.register(destroy_process_groups)
        _registered = True


def destroy_process_groups() -> None:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()  # the default group and every group made from it
