"""Interrupting the end of a run. Once training has finished (the final checkpoint is written), what is
left (final validation, evaluation, samples, curves, export) is reporting: Ctrl-C or SIGTERM there stops
it at once with EndOfRunInterrupted, instead of being ignored until the reports finish or killing the
process without a result.json. During training, CheckpointOnInterrupt and Lightning handle both.

A call that may never return (a reward, a tool, an environment, the async producer's next rollout) runs inside
`abandonable(what)`: SIGTERM arriving there abandons it (CallAbandoned) instead of waiting for the end of a step
that cannot come; a second Ctrl-C abandons anything. Threads left running such a call are named LIT_THREADS, so
that the process can end without them (`hung_threads`).

With several ranks stepping together (`ranks_in_step`), the ranks agree at the end of each such call whether any of
them abandoned its own, and all stop if one did: a rank whose call returned would otherwise go on to the step's next
collective and wait there for the abandoning rank for ever (a SIGTERM to every rank while one waits on a slow
reward). A call that runs the ranks' collectives itself (a sharded reward model's or teacher's forward) is not
abandoned then: its ranks would leave it at different collectives; it ends, as sampling does."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_rlhf.dropped_stops import raise_dropped_stop
from lit_rlhf.errors import EXIT_SIGINT, EXIT_SIGTERM, said
from lit_rlhf.stops_outside_stages import raise_lost_stop

EXIT_CODES = {"SIGINT": EXIT_SIGINT, "SIGTERM": EXIT_SIGTERM}


class EndOfRunInterrupted(BaseException):
    """Ctrl-C or SIGTERM after training finished; `signal_name` is SIGINT or SIGTERM. A BaseException, as
    KeyboardInterrupt is: it may arrive inside a reward, a tool or a callback, whose `except Exception` guards
    would otherwise report it as that code's error."""

    def __init__(self, signal_name: str):
        super().__init__(f"{signal_name} after training finished: the end-of-run reports were skipped")
        self.signal_name = signal_name
        self.rerun_command: str | None = None  # the command that runs the reports again (end_of_run_interrupts)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.signal_name]


class CallAbandoned(SIGTERMException):
    """SIGTERM while the main thread waited on `what` (a reward, a tool, the rollout producer): the call was
    abandoned; Lightning's SIGTERM path writes the checkpoint (the interrupted step runs again on resume).
    in_evaluation: it came in the held-out evaluation after a step (set by CheckpointOnInterrupt), whose checkpoint
    holds that complete step (the evaluation runs again on resume)."""

    def __init__(self, what: str):
        super().__init__(f"SIGTERM while waiting on {what}")
        self.what = what
        self.in_evaluation = False


class StoppedBeforeTraining(SIGTERMException):
    """SIGTERM or Ctrl-C (`signal_name`: SIGTERM or SIGINT) during the fit's set-up, before its first step began
    (while the samples before training were drawn, or waiting on `what` there): nothing was trained, and no checkpoint
    is written. A SIGTERMException whichever the signal, so that what stops on SIGTERM (the rollout producer, the
    apps) stops alike."""

    def __init__(self, signal_name: str, what: str | None = None):
        super().__init__(f"{signal_name} before the first step" + (f" while waiting on {what}" if what else ""))
        self.signal_name, self.what = signal_name, what

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.signal_name]


class StoppedBySignal(BaseException):
    """Ctrl-C or SIGTERM (`signal_name`: SIGINT or SIGTERM) stopped an app that trains nothing (evaluate.py, the
    export) before it wrote its results: nothing was written. A BaseException, as KeyboardInterrupt is (see
    EndOfRunInterrupted)."""

    def __init__(self, signal_name: str):
        super().__init__(f"{signal_name} before the results were written")
        self.signal_name = signal_name

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.signal_name]

    @property
    def line(self) -> str:
        """What the app says as it stops."""
        return f"stopped by {said(self.signal_name)} before the results were written: nothing was written."


LIT_THREADS = ("lit_rlhf-", "lit-rlhf-")  # name prefixes of the threads that run rewards, tools and rollouts
_waiting_on: list[str | None] = []  # what the main thread waits on, innermost last (None: abandoned already)
# while several ranks step together: agree(abandoned here) -> the ranks that abandoned a call, on every rank
_rank_agreements: list[Callable[[bool], list[int]]] = []


@contextmanager
def ranks_in_step(agree: Callable[[bool], list[int]] | None) -> Iterator[None]:
    """Within the block every rank makes the same abandonable calls in the same order (an RL step's rollout, a
    held-out evaluation), and `agree` (None: one rank) is the collective that tells each rank which abandoned one."""
    if agree is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    _rank_agreements.append(agree)
    try:
        yield
    finally:
        _rank_agreements.pop()


@contextmanager
def abandonable(what: str, runs_collectives: bool = False) -> Iterator[None]:
    """The main thread waits on `what` inside the block (a call that may never return): SIGTERM abandons it.
    runs_collectives: the call may run the ranks' collectives (a sharded model's forward), so that it is not
    abandoned while several ranks step together."""
    if threading.current_thread() is not threading.main_thread() or (runs_collectives and _rank_agreements):
        yield
        return
    _waiting_on.append(what)
    abandoned: CallAbandoned | None = None
    try:
        yield
    except CallAbandoned as err:
        if not _rank_agreements:
            raise
        abandoned = err
    finally:
        _waiting_on.pop()
    if _rank_agreements:
        ranks = _rank_agreements[-1](abandoned is not None)
        if abandoned is not None:
            raise abandoned
        if ranks:  # another rank abandoned its call: this one stops with it
            raise CallAbandoned(f"{what} on rank {ranks[0]}" if len(ranks) == 1 else
                                f"{what} on ranks {', '.join(map(str, ranks))}")


def waiting_on() -> str | None:
    """What the main thread waits on now (set by `abandonable`), or None."""
    return _waiting_on[-1] if _waiting_on else None


def abandon_waiting_call() -> str | None:
    """What the main thread waits on, marked abandoned, for the SIGTERM handler to raise CallAbandoned with; None
    when it waits on nothing or abandoned it already: a second SIGTERM (the launching rank forwards the one its
    process group got) must not raise again while the first CallAbandoned is being handled, which would skip the
    ranks' agreement."""
    what = waiting_on()
    if what is not None:
        _waiting_on[-1] = None
    return what


def hung_threads(grace_s: float = 2.0) -> list[threading.Thread]:
    """lit_rlhf's threads (LIT_THREADS) still running after `grace_s`: calls abandoned by an interrupt, which would
    otherwise hold the interpreter's exit while it joins them."""
    deadline = time.monotonic() + grace_s
    # a daemon thread never holds the exit: only pool workers (non-daemon) do
    alive = [t for t in threading.enumerate() if t.name.startswith(LIT_THREADS) and not t.daemon and t.is_alive()]
    for thread in alive:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in alive if t.is_alive()]


@contextmanager
def thread_pool(workers: int, name: str) -> Iterator[ThreadPoolExecutor]:
    """A ThreadPoolExecutor whose threads are named lit_rlhf-<name>; an exception (an interrupt) leaves the block
    without waiting for the calls in flight, which may never return (the pool is shut down without a join)."""
    pool = ThreadPoolExecutor(workers, thread_name_prefix=f"lit_rlhf-{name}")
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


EXIT_PAST_HUNG_THREADS = True  # the apps end their process past abandoned calls (tests running them in-process: off)


def exit_past_hung_threads(code: int) -> None:
    """At an app's exit: when an interrupt abandoned calls that still run in lit_rlhf's threads, the interpreter
    would wait for them (it joins pool threads at exit); flush what was written and end the process now."""
    if not EXIT_PAST_HUNG_THREADS or not hung_threads():
        return
    import logging
    import os
    import sys

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


class TrainingAborted(BaseException):
    """A second Ctrl-C: training stops at once, in the middle of a step, with nothing of that step saved (the
    checkpoints written before it stand). Not a KeyboardInterrupt, which Lightning turns into exit code 1, the code
    of an unexpected error: the apps exit 130, as for the first Ctrl-C."""

    exit_code = EXIT_CODES["SIGINT"]

    def __init__(self, message: str, in_the_stops_checkpoint: bool = False):
        super().__init__(message)
        self.in_the_stops_checkpoint = in_the_stops_checkpoint  # the step had ended: its checkpoint was being written


class StopCutShort(BaseException):
    """A further Ctrl-C once the first one's stop has written its checkpoint: what is left of the fit (its end hooks,
    last.ckpt, the loggers' last writes) ends at once, and the stop is said as the first Ctrl-C made it. It was taken
    for a Ctrl-C during the end-of-run reports ("training had finished"), or for an abort of a step already saved."""


class TrainingInterrupted(BaseException):
    """Ctrl-C stopped training after a complete RL step and its checkpoint (CheckpointOnInterrupt): the run is
    recorded as interrupted, not as finished; the message says how to resume."""

    exit_code = EXIT_CODES["SIGINT"]


@contextmanager
def set_up_stops_on_signals(stopped: Callable[[str], BaseException] = StoppedBeforeTraining) -> Iterator[None]:
    """Around an app's set-up before the fit (the data, the model and rewards loaded, which takes minutes for a large
    model): Ctrl-C or SIGTERM raises StoppedBeforeTraining, said in one line with the run recorded as interrupted
    (`stopped(signal name)`: another exception, e.g. StoppedBySignal around evaluate.py's work). SIGTERM ended the
    process there by its default action (no line, no result.json), Ctrl-C with a traceback. Both handlers are this
    block's own, whatever the process had before (restored after)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    raised: list[BaseException] = []

    def on_signal(signum, frame):
        raised.append(stopped(signal.Signals(signum).name))
        raise raised[-1]

    raise_lost_stop()  # a Ctrl-C or SIGTERM in the imports that a finalizer dropped or a library caught
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
        raise_dropped_stop()  # this block's own stop, dropped in a finalizer while the model loaded
        if raised:  # caught by a library's `except BaseException` and lost
            raise raised[-1]
    except Exception:
        if raised:  # turned into a library's own error by its compiled code, which the signal interrupted
            raise raised[-1] from None
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_sigterm_heard_early = [False]  # by end_of_run_interrupts' handler: see sigterm_heard_early


def sigterm_heard_early() -> bool:
    """Whether a SIGTERM reached the app's handler inside end_of_run_interrupts before training finished: in the
    fit's first moments (Lightning's launch, the other callbacks' set-up) it comes before CheckpointOnInterrupt
    listens, which reads this when it starts to."""
    return _sigterm_heard_early[0]


@contextmanager
def end_of_run_interrupts(training_finished: Callable[[], bool],
                          rerun_command: Callable[[], str | None] = lambda: None,
                          stopped: Callable[[], bool] = lambda: False) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise EndOfRunInterrupted once training_finished() is true, with
    rerun_command(): how to run the reports again (None when there is no way). Before that SIGINT does what it did
    (CheckpointOnInterrupt replaces this handler during fit), and SIGTERM is noted (sigterm_heard_early; Lightning
    chains its SIGTERM handler to this one during training). Once stopped() (a stop ended the fit, its checkpoint
    written: the fit's end runs no reports, and the stop's line follows at once) they pass: a second Ctrl-C there was
    said as a stop of the end-of-run reports."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    _sigterm_heard_early[0] = False

    raised: list[EndOfRunInterrupted] = []

    def handler(signum, frame):
        if stopped():
            return
        if training_finished():
            raised.append(EndOfRunInterrupted(signal.Signals(signum).name))
            raise raised[-1]
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        _sigterm_heard_early[0] = True

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    except EndOfRunInterrupted as err:
        err.rerun_command = rerun_command()
        raise
    except Exception:
        if not raised:
            raise
        # the stop, turned into a library's own error by its compiled code, which the signal interrupted (matplotlib's
        # drawing of the curves: `ValueError: Invalid affine transformation matrix`, a traceback and exit 1)
        raised[-1].rerun_command = rerun_command()
        raise raised[-1] from None
    finally:
        _sigterm_heard_early[0] = False  # the next fit in this process (a test's, a notebook's) starts clean
        for sig, old in previous.items():
            signal.signal(sig, old)
