"""Stops that Python dropped: a Ctrl-C's KeyboardInterrupt, or another exception a signal handler raises to stop the
app, raised inside a finalizer.

A signal handler runs in the main thread between two bytecodes, wherever that thread is. When it is in a finalizer (a
`__del__` or a weakref callback, which the garbage collector runs at any allocation: often during the imports and the
model's loading), Python cannot raise there: it prints "Exception ignored in ..." with a traceback and goes on, and
the run went on as if no Ctrl-C had come, to its end and exit 0. The apps keep such a stop here instead (it is not
printed), and raise it where their next stage begins or ends (set_up_stops_on_signals)."""

from __future__ import annotations

import sys
import threading

_dropped: list[BaseException] = []


def is_stop(error: BaseException | None) -> bool:
    """KeyboardInterrupt, SystemExit and the apps' own stops: what ends a run, not an error of its code."""
    return isinstance(error, BaseException) and not isinstance(error, (Exception, GeneratorExit))


def keep_dropped_stops() -> None:
    """From here on, a stop raised in a finalizer of the main thread is kept for raise_dropped_stop; any other
    exception raised in a finalizer goes to the hook there was before (which prints it)."""
    if getattr(sys.unraisablehook, "keeps_dropped_stops", False):
        return
    previous = sys.unraisablehook

    def keep_or_pass_on(unraisable) -> None:
        if is_stop(unraisable.exc_value) and threading.current_thread() is threading.main_thread():
            _dropped.append(unraisable.exc_value)
        else:
            previous(unraisable)

    keep_or_pass_on.keeps_dropped_stops = True
    sys.unraisablehook = keep_or_pass_on


def raise_dropped_stop() -> None:
    """Raises the first stop dropped since the last call, if one was. Called where a stage of the app begins or ends,
    never in a clean-up (which the stop itself runs, when it is not dropped)."""
    if _dropped:
        stop = _dropped[0]
        _dropped.clear()
        raise stop.with_traceback(None)
