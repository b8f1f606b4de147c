"""Ctrl-C and SIGTERM where no stage of an app listens: its first seconds (the imports of torch and Lightning once the
config is composed, up to a minute on a cluster's shared filesystem), and the moments between its stages.

Python turns Ctrl-C there into a KeyboardInterrupt, which the apps end in one line; SIGTERM (a scheduler's preemption,
`timeout`, `kill`) ended the process by its default action: no line, and a run directory holding only Hydra's start
files, which a rerun of the same command with the same hydra.run.dir was refused. The apps raise
TerminatedOutsideTheStages instead, and end it as they end that Ctrl-C (the stages replace these handlers with their
own while they run). Both handlers note the stop: one that interrupted an import can leave its module half made, and
the next import of it then fails (numpy's `RecursionError`, pybind11's `generic_type: type ... is already
registered!`); that error follows the stop, and is said as the stop. A stop a library caught is raised again
where the app's next stage begins."""

from __future__ import annotations

import signal
import threading

from lit_rlhf.dropped_stops import raise_dropped_stop

_heard: list[str] = []  # the signals these handlers raised a stop for since the app started (forget_stops_heard)


class TerminatedOutsideTheStages(BaseException):
    """SIGTERM heard where no stage of the app listens; a BaseException, as KeyboardInterrupt is, so that a library's
    `except Exception` does not take it for an error of its own."""


def take_stops_outside_the_stages() -> None:
    """From here on, Ctrl-C raises KeyboardInterrupt as Python's own handler does, and SIGTERM raises
    TerminatedOutsideTheStages where it would end the process by its default action; both noted. A signal ignored
    when the process started (a background job of a script: Ctrl-C), or given a handler by another program (a
    launcher's, a notebook's), is left alone; the main thread only, where signal handlers are set."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, python_default, handler in ((signal.SIGINT, signal.default_int_handler, raise_keyboard_interrupt),
                                         (signal.SIGTERM, signal.SIG_DFL, raise_terminated)):
        if signal.getsignal(sig) is python_default:
            signal.signal(sig, handler)


def forget_stops_heard() -> None:
    """As an app starts: a stop heard by an earlier app in this process (a test's, a notebook's) is none of its own,
    and raise_lost_stop would stop it as it began."""
    _heard.clear()


def stop_heard_outside_the_stages() -> str | None:
    """The signal ("SIGINT", "SIGTERM") of the first stop these handlers raised since the app started, or None."""
    return _heard[0] if _heard else None


def raise_lost_stop() -> None:
    """Raises again a stop that was lost: dropped in a finalizer (dropped_stops), or raised by these handlers and
    caught by a library's `except BaseException`; the app went on as if none had come (a reward server then served
    until killed). Called where a stage of the app begins: a stop these handlers raised ends the app otherwise."""
    raise_dropped_stop()
    if _heard:
        raise KeyboardInterrupt if _heard[0] == "SIGINT" else TerminatedOutsideTheStages


def raise_keyboard_interrupt(signum, frame) -> None:
    _heard.append("SIGINT")
    raise KeyboardInterrupt


def raise_terminated(signum, frame) -> None:
    _heard.append("SIGTERM")
    raise TerminatedOutsideTheStages
