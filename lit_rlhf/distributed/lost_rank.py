"""A rank of a distributed run that dies (killed, out of memory, a node lost) makes the others' next collective fail
with the backend's error (gloo: "Connection closed by peer"); that is said in one line naming the lost rank, with
where to resume, instead of a trace on every survivor."""

from __future__ import annotations

import re

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
