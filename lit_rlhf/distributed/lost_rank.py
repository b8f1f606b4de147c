"""A rank of a distributed run that dies (killed, out of memory, a node lost) makes the others' next collective fail
with the backend's error (gloo: "Connection closed by peer"); that is said in one line naming the lost rank, with
where to resume, instead of a trace on every survivor. A rank that is between collectives when another dies (sampling,
writing a checkpoint) is given time to reach the next one, and is stopped with the same line if it does not."""

from __future__ import annotations

import re
from collections.abc import Callable

from lightning.pytorch.utilities import rank_zero_warn

# what gloo and NCCL raise in a collective whose peer process is gone
LOST_PEER = re.compile(r"connection closed by peer|connection reset by peer|remote worker crash|broken pipe|"
                       r"remote process exited|socket timeout|failed to recv", re.IGNORECASE)


def lost_rank_line(err: BaseException, rank: int, world_size: int) -> str | None:
    """The line for a collective that failed because another rank is gone, or None for any other error."""
    if world_size < 2 or not isinstance(err, RuntimeError) or not LOST_PEER.search(str(err)):
        return None
    lost = f"rank {1 - rank}" if world_size == 2 else "another rank"
    return (f"rank {rank} lost {lost} of this {world_size}-rank run (it was killed or crashed; its own output says "
            f"why), and stopped.")


def report_lost_ranks(trainer, where_to_resume: Callable[[], str]) -> None:
    """Has the trainer's launcher (if it starts the other ranks itself) watch them with LostRankObserver. Under a
    Lightning whose launcher internals are not those it is built on, Lightning's own watch stays, said once: a lost
    rank then ends the launching rank without the line."""
    launcher = trainer.strategy.launcher
    if launcher is None or trainer.world_size < 2:
        return
    try:
        from lit_rlhf.distributed.grace_launcher import GraceLauncher, SubprocessScriptLauncher
    except ImportError as err:
        rank_zero_warn(f"a lost rank will not be named: this Lightning's launcher is not the one lit_rlhf watches the "
                       f"ranks through ({err}); the run itself is unaffected.")
        return
    if type(launcher) is SubprocessScriptLauncher:
        trainer.strategy._launcher = GraceLauncher.replacing(launcher, where_to_resume)
