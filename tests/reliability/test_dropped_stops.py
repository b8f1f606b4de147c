"""A stop that a finalizer dropped: the signal handler's exception raised inside a `__del__`, which Python prints as
"Exception ignored in ..." and goes on from. The app was signalled in its first seconds and ran to its end, exit 0."""

import sys

import pytest

from lit_rlhf.dropped_stops import keep_dropped_stops, raise_dropped_stop
from lit_rlhf.interrupts import StoppedBeforeTraining, set_up_stops_on_signals


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
