"""Sums over the data-parallel ranks of a Lightning run, and work that rank zero does for all of them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import torch

from lit_rlhf.errors import ConfigError, UnavailableError
from lit_rlhf.ops import identity_sum

T = TypeVar("T")
POLL_S = 0.005  # the longest a rank waiting for the others in ranks_that_flag sleeps before it looks again
# the errors rank zero's work may end with that every rank raises again, by name, with rank zero's line
SHARED_ERRORS = {cls.__name__: cls for cls in (ConfigError, UnavailableError)}


def sum_over_ranks(trainer) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function that sums a tensor over the ranks of trainer's run (the tensor itself on one rank, or with no
    Trainer): the all_reduce_sum that estimators and the whitening of advantages take."""
    if trainer is None or trainer.world_size == 1:
        return identity_sum
    return lambda total: trainer.strategy.reduce(total.clone(), reduce_op="sum")


def ranks_in_run() -> int:
    """The processes of the default process group (1 without one)."""
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def on_rank_zero(action: Callable[[], T]) -> T:
    """`action()` on rank zero alone, its (picklable) result given to every rank. Every rank must call it. When
    the action fails with a one-line error (ConfigError, UnavailableError, or their subclasses), every other rank
    raises the same line, so that all ranks stop together instead of waiting for rank zero; rank zero raises its
    own exception. One process: action()."""
    if ranks_in_run() == 1:
        return action()
    rank_zero = torch.distributed.get_rank() == 0
    outcome: list = [None, None]  # [result, (error class name, message) or None]
    error = None
    if rank_zero:
        try:
            outcome[0] = action()
        except (ConfigError, UnavailableError) as err:
            error = err
            name = next(n for n, cls in SHARED_ERRORS.items() if isinstance(err, cls))
            outcome = [None, (name, str(err))]
        except Exception as err:  # any other failure still stops the other ranks, with its type named
            error = err
            outcome = [None, ("UnavailableError", f"rank 0 failed ({type(err).__name__}: {err})")]
    torch.distributed.broadcast_object_list(outcome, src=0)
    if error is not None:
        raise error
    if outcome[1] is not None:
        name, message = outcome[1]
        raise SHARED_ERRORS[name](message)
    return outcome[0]


def ranks_that_flag(flag: bool, device: torch.device) -> list[int]:
    """The ranks of the default process group that call this with flag=True, known to every rank (every rank must
    call it). One all-reduce, waited on by polling: a blocking wait holds the main thread in the collective, where no
    Python signal handler runs, so a SIGTERM reaching this rank while it waits for the others would not be noted, nor
    forwarded to the ranks this process started, until they came."""
    dist = torch.distributed
    flags = torch.zeros(dist.get_world_size(), dtype=torch.int32, device=device)
    flags[dist.get_rank()] = int(flag)
    work = dist.all_reduce(flags, async_op=True)
    pause = POLL_S / 64  # short at first: the ranks usually come together
    while not work.is_completed():
        time.sleep(pause)
        pause = min(2 * pause, POLL_S)
    work.wait()  # raises the collective's error (a lost rank)
    return flags.nonzero().flatten().tolist()
