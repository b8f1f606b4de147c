"""The apps' handlers for Ctrl-C and SIGTERM where no stage listens (their first seconds)."""

import signal

import pytest

from lit_rlhf.stops_outside_stages import (
    TerminatedOutsideTheStages,
    forget_stops_heard,
    raise_lost_stop,
    stop_heard_outside_the_stages,
    take_stops_outside_the_stages,
)
from tests.apps import run_app
from tests.helpers import FAST


@pytest.fixture
def handlers_restored():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    forget_stops_heard()  # an app run before in this process may have ended on a stop
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    forget_stops_heard()


def test_ctrl_c_and_sigterm_raise_stops_that_are_noted(handlers_restored):
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    take_stops_outside_the_stages()
    assert stop_heard_outside_the_stages() is None
    with pytest.raises(TerminatedOutsideTheStages):
        signal.raise_signal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    assert stop_heard_outside_the_stages() == "SIGTERM"  # the first one


def test_a_signal_ignored_or_handled_before_the_app_started_is_left_alone(handlers_restored):
    """A background job of a script starts with Ctrl-C ignored (Python then sets no handler for it), and a launcher may
    have its own SIGTERM handler."""
    def launchers(signum, frame):
        pass

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, launchers)
    take_stops_outside_the_stages()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is launchers


def test_a_stop_a_library_caught_is_raised_again_where_the_next_stage_begins(handlers_restored):
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    take_stops_outside_the_stages()
    raise_lost_stop()  # none heard: nothing raised
    try:
        signal.raise_signal(signal.SIGTERM)
    except BaseException:  # a library's catch-all
        pass
    with pytest.raises(TerminatedOutsideTheStages):
        raise_lost_stop()


@pytest.mark.integration
def test_an_app_run_in_a_process_where_an_earlier_app_heard_a_stop_runs(handlers_restored, tmp_path):
    """A notebook, a test process: the stop an earlier app heard (and ended on) stopped every later app's set-up."""
    from lit_rlhf import stops_outside_stages

    stops_outside_stages._heard.append("SIGTERM")  # as an earlier app's stop left it
    result = run_app("train.py", "hydra.run.dir=run", *FAST, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
