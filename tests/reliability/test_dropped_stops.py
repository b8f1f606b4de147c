"""A stop that was lost: the signal handler's exception raised inside a `__del__`, which Python prints as "Exception
ignored in ..." and goes on from (the app was signalled in its first seconds and ran to its end, exit 0), caught by a
library's `except BaseException`, or turned into a library's own error by its compiled code."""

import sys
import time

import pytest

from lit_rlhf.dropped_stops import keep_dropped_stops, raise_dropped_stop
from lit_rlhf.interrupts import (
    EndOfRunInterrupted,
    StoppedBeforeTraining,
    end_of_run_interrupts,
    set_up_stops_on_signals,
)
from tests.helpers import signal_this_process


class RaisesInItsFinalizer:
    """Raises `error` when it is collected, as a signal handler does when the signal comes while a finalizer runs."""

    def __init__(self, error: BaseException):
        self.error = error

    def __del__(self):
        raise self.error


@pytest.fixture
def kept(monkeypatch):
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # put back after the test
    keep_dropped_stops()
    yield
    try:
        raise_dropped_stop()  # nothing left over for the next test
    except BaseException as stop:  # noqa: BLE001 (a KeyboardInterrupt would end the whole pytest session)
        pytest.fail(f"a dropped stop was left over: {stop!r}")


def test_a_ctrl_c_dropped_in_the_imports_is_raised_where_the_set_up_begins(kept):
    RaisesInItsFinalizer(KeyboardInterrupt())  # collected at once: dropped, not raised here
    with pytest.raises(KeyboardInterrupt):
        with set_up_stops_on_signals():
            pytest.fail("the set-up began after the Ctrl-C")


def test_the_set_ups_own_stop_dropped_while_it_loads_is_raised_where_it_ends(kept):
    loaded = []
    with pytest.raises(StoppedBeforeTraining, match="SIGTERM"):
        with set_up_stops_on_signals():
            RaisesInItsFinalizer(StoppedBeforeTraining("SIGTERM"))
            loaded.append("the model")
    assert loaded == ["the model"]  # what went on after the drop: the stop comes at the block's end


def test_an_error_in_a_finalizer_is_no_stop_and_reaches_the_hook_before(monkeypatch):
    passed_on = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: passed_on.append(unraisable.exc_value))
    keep_dropped_stops()
    keep_dropped_stops()  # once: the second call does not wrap the first
    RaisesInItsFinalizer(ValueError("a library's bug"))
    RaisesInItsFinalizer(KeyboardInterrupt())
    assert [type(e) for e in passed_on] == [ValueError]
    with pytest.raises(KeyboardInterrupt):
        raise_dropped_stop()
    raise_dropped_stop()  # raised once


def test_the_set_ups_stop_that_a_library_caught_is_raised_where_the_set_up_ends():
    loaded = []
    with pytest.raises(StoppedBeforeTraining, match="SIGINT"):
        with set_up_stops_on_signals():
            try:
                signal_this_process("SIGINT")
                time.sleep(5)  # the handler raises here
            except BaseException:  # noqa: BLE001 (a library's bare except)
                pass
            loaded.append("the model")
    assert loaded == ["the model"]


def test_a_stop_of_the_reports_that_compiled_code_turned_into_its_own_error_is_said_as_the_stop():
    """matplotlib's drawing of the curves, its C++ code interrupted: `ValueError: Invalid affine transformation
    matrix` and its traceback, exit 1, where the Ctrl-C stops the reports in one line."""
    with pytest.raises(EndOfRunInterrupted) as stopped:
        with end_of_run_interrupts(lambda: True, lambda: "python train.py ckpt_path=last.ckpt"):
            try:
                signal_this_process("SIGINT")
                time.sleep(5)
            except BaseException:  # noqa: BLE001
                raise ValueError("Invalid affine transformation matrix")  # noqa: B904
    assert stopped.value.signal_name == "SIGINT"
    assert stopped.value.rerun_command == "python train.py ckpt_path=last.ckpt"


def test_an_error_of_the_reports_without_a_stop_stays_that_error():
    with pytest.raises(ValueError, match="a library's bug"):
        with end_of_run_interrupts(lambda: True):
            raise ValueError("a library's bug")
