"""SIGTERM where no stage of an app listens: its first seconds (the imports of torch and Lightning once the config is
composed, up to a minute on a cluster's shared filesystem), and the moments between its stages.

Python turns Ctrl-C there into a KeyboardInterrupt, which the apps end in one line; SIGTERM (a scheduler's preemption,
`timeout`, `kill`) ended the process by its default action: no line, and a run directory holding only Hydra's start
files, which a rerun of the same command with the same hydra.run.dir was refused. The apps raise this exception
instead, and end it as they end that Ctrl-C (the stages replace the handler with their own while they run)."""

from __future__ import annotations

import signal
import threading


class TerminatedOutsideTheStages(BaseException):
    """SIGTERM heard where no stage of the app listens; a BaseException, as KeyboardInterrupt is, so that a library's
    `except Exception` does not take it for an error of its own."""


def take_sigterm_as_a_stop() -> None:
    """From here on, SIGTERM raises TerminatedOutsideTheStages where it would end the process by its default action.
    A handler another program set (a launcher's, a notebook's) is left alone; the main thread only, where signal
    handlers are set."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, raise_terminated)


def raise_terminated(signum, frame) -> None:
    raise TerminatedOutsideTheStages
