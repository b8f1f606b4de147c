"""A run that leaves its process group to the interpreter's finalization can end with SIGABRT after it finished: gloo's
worker threads hold work whose tensors reach back into Python once the interpreter is being torn down ("terminate
called without an active exception", exit code -6; torchrun then reports the node failed). Lightning destroys the
group at exit for NCCL only; the modules have it destroyed at exit for every backend, while the interpreter is whole."""

from __future__ import annotations

import atexit
import time

import torch

# A gloo worker thread lets go of its last collective's tensors just after that collective returned to Python, and a
# tensor whose Python object is gone takes the GIL to be freed: a thread that asks for the GIL once the interpreter's
# finalization has begun is ended inside that destructor, which aborts the process (the same SIGABRT, seen on two
# CPU ranks with FSDP2, whose reduce-scatters leave such tensors). No handle says when the workers are done; the GIL
# is released this long, ample for a runnable thread to be scheduled and finish.
WORKER_DRAIN_S = 0.2

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
        time.sleep(WORKER_DRAIN_S)  # the workers' last tensors freed while the interpreter is whole (above)
