"""Stopping a sweep whose jobs run in local worker processes (hydra/launcher=joblib).

Ctrl-C in the terminal, and a SIGTERM sent to the process group (`timeout`, a cluster's scheduler), reach the sweep's
process and each worker. Each job in progress stops as a single run does (after its step in progress, with its
checkpoint, result.json and the line that resumes it) and returns to the launcher; the sweep's process waits for them,
marks the sweep as stopping (STOP_MARKER in the sweep directory, so that the jobs not started yet do not run), writes
the summary of the jobs that ran and ends with one line, exit 130 or 143. Left to joblib, the first Ctrl-C killed the
workers, possibly before their checkpoint; that stays the answer to a third Ctrl-C (a second aborts the jobs' steps
in progress, as in a single run). Launchers whose jobs run elsewhere (a cluster's) keep Hydra's and their own
handling of the sweep's process.

Between a worker's jobs (and before a job's stages set their own handlers) a stop is not an exception: loky reads a
worker that a KeyboardInterrupt ended while it waited for its next job as a crash, and ends the whole pool."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

from lit_rlhf.errors import EXIT_SIGINT, EXIT_SIGTERM, said
from lit_rlhf.terminal import printable

STOP_MARKER = ".stopping"
_stop: dict[str, Any] = {}  # in the sweep's process, once a stop was heard: its signal and the sweep directory
_previous_handlers: dict[int, Any] = {}


def runs_jobs_in_local_workers(config: Any) -> bool:
    """Whether the sweep's launcher runs its jobs in worker processes of this machine, in the sweep's process group
    (joblib's), where the terminal's Ctrl-C reaches them."""
    return str(config.hydra.launcher.get("_target_", "")).endswith(".JoblibLauncher")


def listen_for_stops(sweep_dir: Path) -> None:
    """In the sweep's process, while the launcher runs the jobs: the first Ctrl-C or SIGTERM marks the sweep as
    stopping and is said once. A second Ctrl-C, which the workers hear too, aborts their jobs as it aborts a single
    run (their lines and result.json said and written); a third is a KeyboardInterrupt, on which joblib kills its
    workers where they are."""
    if threading.current_thread() is not threading.main_thread():
        return
    _stop.clear()

    def on_stop(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if _stop:
            if signum != signal.SIGINT:  # a later SIGTERM changes nothing
                return
            _stop["ctrl_c_again"] = _stop.get("ctrl_c_again", 0) + 1
            if _stop["ctrl_c_again"] > 1:
                raise KeyboardInterrupt  # joblib kills its workers on it
            sys.stderr.write("Ctrl-C again: the sweep's jobs in progress end at once, without their step in progress "
                             "(a third Ctrl-C kills the workers where they are).\n")  # the workers heard it too
            sys.stderr.flush()
            return
        _stop.update(signal=name, sweep_dir=sweep_dir)
        try:
            (sweep_dir / STOP_MARKER).write_text(name + "\n", encoding="utf-8")
        except OSError as err:  # a full disk: the jobs not started yet run, each stopped by nothing
            print(f"warning: the sweep could not mark itself as stopping ({err.strerror}): the jobs not started yet "
                  f"will run.", file=sys.stderr, flush=True)
        again = " (Ctrl-C again to end them at once, without their step in progress)" if signum == signal.SIGINT else ""
        sys.stderr.write(f"{said(name)}: the sweep's jobs in progress stop after their step in progress{again}; the "
                         f"jobs not started yet will not run.\n")  # one write: the workers write to this stream too
        sys.stderr.flush()

    for sig in (signal.SIGINT, signal.SIGTERM):
        _previous_handlers[sig] = signal.signal(sig, on_stop)


def stop_listening(sweep_dir: Path) -> None:
    """Once the launcher has returned: the process's own handlers again, and the marker gone."""
    for sig, handler in _previous_handlers.items():
        signal.signal(sig, handler)
    _previous_handlers.clear()
    (sweep_dir / STOP_MARKER).unlink(missing_ok=True)


def sweep_stopping(sweep_dir: Path) -> bool:
    """In a worker, as a job starts: whether the sweep's process heard a stop (the job then does not run)."""
    return (sweep_dir / STOP_MARKER).exists()


def _stop_heard_between_stages(signum: int, frame: Any) -> None:
    """A worker's handler outside its job's stages: the sweep's process has heard the stop too, and the jobs not
    started then do not run."""


def stops_pass_between_jobs() -> None:
    """In a worker, as a job starts, and left so after it: the worker waits for its next job. The job's stages set
    their own handlers."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _stop_heard_between_stages)


class JobStopped(BaseException):
    """A sweep's job in a worker, stopped by Ctrl-C or SIGTERM and recorded: it returns no objective."""


def stop_heard_in() -> Path | None:
    """In the sweep's process: the directory of the sweep that heard a stop (not yet said), else None."""
    return _stop.get("sweep_dir")


def sweep_stop_line(stopped_jobs: list[int]) -> tuple[str, int] | None:
    """Once the launcher has returned in the sweep's process: the line that ends a stopped sweep and its exit code,
    or None when no stop was heard. stopped_jobs: the jobs that a stop ended (their result.json)."""
    if not _stop:
        return None
    name, sweep_dir = _stop["signal"], _stop["sweep_dir"]
    _stop.clear()
    if stopped_jobs:
        numbers = [str(job) for job in stopped_jobs]
        jobs = " and ".join([", ".join(numbers[:-1]), numbers[-1]] if len(numbers) > 1 else numbers)
        stopped = (f"its job{'s' if len(numbers) > 1 else ''} {jobs} stopped, each as its line above says (and how to "
                   f"resume it), and the jobs not started then did not run")
    else:
        stopped = "the jobs not started then did not run"
    return f"The sweep stopped by {said(name)}: {stopped}; summary.csv in {printable(sweep_dir)} lists the jobs that " \
           f"ran.", EXIT_SIGINT if name == "SIGINT" else EXIT_SIGTERM
