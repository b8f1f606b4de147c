"""What a run stopped by Ctrl-C or SIGTERM says, and how its process ends: one line that says what the stop did and
how to go on, exit 130 or 143."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from lit_rlhf.errors import EXIT_SIGTERM


@contextmanager
def interruptions_end_the_process(on_interrupt: Callable[[str], None] | None = None, step_name: str = "RL step",
                                  said_before: str | None = None) -> Iterator[None]:
    """A run stopped by Ctrl-C or SIGTERM inside the block (before, during or after training) ends the process: its
    line (interruption_line, after HUNG_UP where SIGHUP stopped it) goes to on_interrupt, then to stderr on rank zero
    (after `said_before`, a line of context), and the exit code is 130 or 143."""
    from lightning.pytorch.utilities import rank_zero_only

    try:
        yield
    except interruption_types() as err:
        message, code = stop_message(err, step_name)
        if on_interrupt is not None:
            on_interrupt(message)
        if rank_zero_only.rank == 0:  # every rank stops alike: the line is said once
            print(message if said_before is None else f"{said_before}\n{message}", file=sys.stderr, flush=True)
        sys.exit(code)


def stop_message(err: BaseException, step_name: str) -> tuple[str, int]:
    """interruption_line, after HUNG_UP where SIGHUP (the terminal closed) stopped the run."""
    from lit_rlhf.output_streams import HUNG_UP, hung_up

    message, code = interruption_line(err, step_name)
    return (f"{HUNG_UP}{message}" if hung_up() else message), code


def interruption_types() -> tuple[type[BaseException], ...]:
    """What a stop by Ctrl-C or SIGTERM raises (imported when a task runs: --help answers without Lightning)."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from lit_rlhf.interrupts import EndOfRunInterrupted, StoppedBySignal, TrainingAborted, TrainingInterrupted

    return SIGTERMException, EndOfRunInterrupted, TrainingInterrupted, TrainingAborted, StoppedBySignal


def interruption_line(err: BaseException, step_name: str) -> tuple[str, int]:
    """The line that says what a stop by Ctrl-C or SIGTERM did and how to go on, and the process's exit code."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from lit_rlhf.interrupts import (
        CallAbandoned,
        StoppedBeforeTraining,
        StoppedBySignal,
        TrainingAborted,
        TrainingInterrupted,
        said,
    )

    if isinstance(err, StoppedBySignal):
        return err.line, err.exit_code
    if isinstance(err, TrainingInterrupted):
        return str(err), err.exit_code
    if isinstance(err, TrainingAborted):
        ended = ("while the checkpoint of the stop was written: it was not written" if err.in_the_stops_checkpoint else
                 f"before the {step_name} in progress ended: nothing of it was saved")
        return (f"stopped by a second Ctrl-C {ended}; the "
                f"checkpoints written before it stand (resume from checkpoints/last.ckpt, if one was written)."
                ), err.exit_code
    if isinstance(err, StoppedBeforeTraining):
        waiting = f" (while waiting on {err.what}, which was abandoned)" if err.what else ""
        return (f"stopped by {said(err.signal_name)} before the first {step_name} began{waiting}: nothing was trained "
                f"and no checkpoint was written; run the same command again to start it (or resume it)."), err.exit_code
    if isinstance(err, CallAbandoned):
        runs_again = (f"it holds the last complete {step_name}; the interrupted held-out evaluation runs again first"
                      if err.in_evaluation else f"the interrupted {step_name} runs again")
        return (f"stopped by SIGTERM while waiting on {err.what}, which did not return: the call was abandoned; "
                f"resume from the checkpoint above ({runs_again})."), EXIT_SIGTERM
    if isinstance(err, SIGTERMException):
        return f"stopped by SIGTERM after a complete {step_name}; resume from the checkpoint above.", EXIT_SIGTERM
    rerun = f"; run them again with: {err.rerun_command}" if err.rerun_command else "."  # EndOfRunInterrupted
    return (f"stopped by {said(err.signal_name)} during the end-of-run reports; training had finished and its final "
            f"checkpoint is written (checkpoints/last.ckpt){rerun}"), err.exit_code
