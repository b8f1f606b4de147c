"""Standard output and error whose reader may go away. A run piped into another program (`python train.py | head`, a
`tee` that was killed) met BrokenPipeError at its next line, which Rich (Lightning's model summary, the apps' tables)
turns into exit code 1 without a word: the run ended where it stood, with no result.json and no checkpoint of the
steps since the last one. The apps' streams send what follows to os.devnull once their reader has gone, and the run
goes on: its records are its files (logs, checkpoints, result.json), and stderr says once that stdout has gone.
A terminal that closed (an ssh session that dropped) answers writes with EIO: the same then, while the app stops
as on SIGTERM (take_hangup_for_sigterm).

A command that only prints (--help, --cfg, --info) ends on a closed pipe instead, as cat does (run_hydra_app)."""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any, TextIO

READER_GONE = (errno.EPIPE, errno.EIO)  # a pipe whose reader closed it; a terminal that hung up
STDOUT_GONE = ("standard output's reader has gone (a closed pipe or terminal): the command goes on and prints nothing "
               "more there; what it writes to files is unchanged, and Ctrl-C stops it as before.")


class OutputWhoseReaderMayGo:
    """`stream` (a text stream on a file descriptor) whose writes, once its reader has gone (READER_GONE), go to
    os.devnull instead of raising; `on_gone()` is called once then. Everything else is the stream's own."""

    def __init__(self, stream: TextIO, on_gone: Callable[[], None] = lambda: None):
        self._stream = stream
        self._on_gone = on_gone
        self._gone = False
        self._lock = threading.Lock()  # two threads may meet the closed pipe at once (a progress bar's refresh)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as err:
            if err.errno not in READER_GONE:
                raise
            self._reader_gone()
            return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as err:
            if err.errno not in READER_GONE:
                raise
            self._reader_gone()

    @property
    def reader_gone(self) -> bool:
        return self._gone

    def _reader_gone(self) -> None:
        with self._lock:
            if self._gone:
                return
            self._gone = True
            # on the descriptor, so that the buffered text, the interpreter's last flush and what a library writes to
            # the descriptor itself all go nowhere without an error
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
            self._stream.flush()
        self._on_gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def say_stdout_gone() -> None:
    print(STDOUT_GONE, file=sys.stderr, flush=True)


def outputs_survive_their_readers() -> None:
    """The process's stdout and stderr go on (to os.devnull) once their reader has gone, stderr saying once that stdout
    has. Streams another program put in place (a test's capture, a notebook's) are left alone."""
    if sys.stdout is sys.__stdout__ and sys.stdout is not None and has_descriptor(sys.stdout):
        sys.stdout = OutputWhoseReaderMayGo(sys.stdout, say_stdout_gone)
    if sys.stderr is sys.__stderr__ and sys.stderr is not None and has_descriptor(sys.stderr):
        sys.stderr = OutputWhoseReaderMayGo(sys.stderr)


def has_descriptor(stream: TextIO) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return False
    return True


HUNG_UP = "the terminal closed (SIGHUP, which stops a run as SIGTERM does): "  # before the stop's line
_hung_up = [False]  # SIGHUP came (sigterm_instead)


def hung_up() -> bool:
    """Whether SIGHUP reached the app since it started: its stop's line then begins with HUNG_UP."""
    return _hung_up[0]


def take_hangup_for_sigterm() -> None:
    """SIGHUP (the app's terminal closed: an ssh session that dropped, a terminal window shut) stops the app as SIGTERM
    does (during training after the step in progress, with its checkpoint) instead of by the default action, which
    ended it where it stood, the steps since the last periodic checkpoint lost. Left alone under nohup (ignored) or a
    handler another program set; the main thread only, where signal handlers are set."""
    _hung_up[0] = False  # the next app run in this process (a test's, a notebook's) starts clean
    if (hasattr(signal, "SIGHUP") and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGHUP) is signal.SIG_DFL):
        signal.signal(signal.SIGHUP, sigterm_instead)


def sigterm_instead(signum, frame) -> None:
    _hung_up[0] = True
    signal.raise_signal(signal.SIGTERM)  # whichever handler SIGTERM has now runs, here (raise_signal checks signals)
