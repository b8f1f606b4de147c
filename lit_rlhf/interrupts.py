"""Interrupting the end of a run. Once training has finished (the final checkpoint is written), what is
left (final validation, evaluation, samples, curves, export) is reporting: Ctrl-C or SIGTERM there stops
it at once with EndOfRunInterrupted, instead of being ignored until the reports finish or killing the
process without a result.json. During training, CheckpointOnInterrupt and Lightning handle both."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


class EndOfRunInterrupted(BaseException):
    """Ctrl-C or SIGTERM after training finished; `signal_name` is SIGINT or SIGTERM. A BaseException, as
    KeyboardInterrupt is: it may arrive inside a reward, a tool or a callback, whose `except Exception` guards
    would otherwise report it as that code's error."""

    def __init__(self, signal_name: str):
        super().__init__(f"{signal_name} after training finished: the end-of-run reports were skipped")
        self.signal_name = signal_name

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.signal_name]


class TrainingInterrupted(BaseException):
    """Ctrl-C stopped training after a complete RL step and its checkpoint (CheckpointOnInterrupt): the run is
    recorded as interrupted, not as finished; the message says how to resume."""

    exit_code = EXIT_CODES["SIGINT"]


@contextmanager
def end_of_run_interrupts(training_finished: Callable[[], bool]) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise EndOfRunInterrupted once training_finished() is true.
    Before that they do what they did (Lightning chains its SIGTERM handler to this one and does nothing
    here during training; CheckpointOnInterrupt replaces SIGINT's during fit)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum, frame):
        if training_finished():
            raise EndOfRunInterrupted(signal.Signals(signum).name)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
