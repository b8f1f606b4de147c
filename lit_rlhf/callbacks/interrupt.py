"""CheckpointOnInterrupt: Ctrl-C or SIGTERM ends the run with a checkpoint to resume from.

Ctrl-C (SIGINT) no longer stops a step halfway through its updates: the first one finishes the
current RL step, writes <checkpoints>/interrupted.ckpt and ends fit (summaries included, the end-of-run
evaluation skipped; train.py then exits 130 with the run recorded as interrupted); a second one aborts at
once (before the checkpoint, the step in progress; after it, the rest of the fit's end: StopCutShort). SIGTERM
(a scheduler's preemption) goes through Lightning, which stops after the current step; the
checkpoint is written then, or at once when the main thread waits on a call that may never return (a reward, a
tool, the async producer: `abandonable`), which is abandoned. A SIGTERM during the fit's set-up (the samples drawn
before training included) stops the run before its first step, without a checkpoint: nothing was trained (a first
Ctrl-C there lets the call in progress end, as in a step). After training has finished (the final checkpoint is
written), Ctrl-C stops the end-of-run reports at once (EndOfRunInterrupted).

With several ranks, a signal is only noted where it arrives (SIGTERM forwarded once to the ranks this process
launched), and the ranks agree at the end of every step whether any of them was signalled, so that they stop
after the same step. Lightning's own SIGTERM handler is not called there: it broadcasts from inside the handler,
which hangs the run when one rank is signalled twice (a SIGTERM to the process group, plus the launcher's
forwarded copy) or while the others wait in another collective.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_rlhf.interrupts import (
    CallAbandoned,
    EndOfRunInterrupted,
    StopCutShort,
    StoppedBeforeTraining,
    TrainingAborted,
    abandon_waiting_call,
    sigterm_heard_early,
)


class CheckpointOnInterrupt(Checkpoint):
    """A `Checkpoint`, so Lightning runs it after every other callback: the state it saves includes
    what they updated at the end of the step (KL coefficient, normalizer moments)."""

    def __init__(self, dirpath: str | None = None, filename: str = "interrupted.ckpt", step_name: str = "RL step"):
        self.dirpath, self.filename = dirpath, filename
        self.step_name = step_name  # what its messages call a step: an RL step, or a training step of an offline fit
        # how to resume from the checkpoint, printed with it: train.py sets its own command line + ckpt_path
        self.resume_hint: Callable[[Path], str] = library_resume_hint
        self.stopped_by: str | None = None  # SIGINT or SIGTERM, once it stopped training
        self.requested = False  # Ctrl-C on this rank: stop after this step
        self.writing_the_stops_checkpoint = False  # after the step a Ctrl-C stopped
        self.sigterm_noted = False  # SIGTERM on this rank of several: stop after this step
        self._trainer: L.Trainer | None = None
        self.training_started = False  # on_train_start passed: Ctrl-C and SIGTERM now write a checkpoint
        self.training_finished = False
        self.path: Path | None = None
        self._previous_handler = None
        self._previous_sigterm = None
        self._handed_back: dict[int, Any] = {}  # the handlers before a fit that raised (see on_exception)
        self._optimizer_steps_before: int | None = None  # trainer.global_step as the training batch began
        self._max_steps_before_stop: int | None = None  # the fit's step limit while a Ctrl-C ends the epoch

    def setup(self, trainer: L.Trainer, module, stage: str) -> None:
        # heard from here on: the fit's set-up and the samples drawn before training (minutes with a large model) come
        # before Lightning's own SIGTERM handler, and a SIGTERM there was lost
        if stage != TrainerFn.FITTING:
            return
        self.requested, self.path, self.training_finished, self.stopped_by = False, None, False, None
        self.sigterm_noted, self.training_started, self._trainer = sigterm_heard_early(), False, trainer
        self._handed_back = {}
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGINT, self._on_sigint)
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)  # Lightning's calls it

    def on_train_end(self, trainer: L.Trainer, module) -> None:
        self.training_finished = True  # the final checkpoint is written: Ctrl-C now skips the reports
        if self.stopped_by is None and self.training_started:
            # heard after the last step's end (its held-out evaluation, the final checkpoints' write), where no step's
            # end checks it: the run went on to its end-of-run reports and exit 0, as if no Ctrl-C had come
            sigint, sigterm = self.signalled_on_any_rank(trainer)
            if sigint or sigterm:
                raise EndOfRunInterrupted("SIGTERM" if sigterm else "SIGINT")

    def _on_sigint(self, signum, frame) -> None:
        if self._passed_back(signum, frame):
            return
        if self.stopped_by == "SIGINT":  # the stop's checkpoint is written: the fit's end is cut short
            raise StopCutShort
        if self.training_finished:
            raise EndOfRunInterrupted("SIGINT")
        if self.requested:  # second Ctrl-C: abort now
            signal.signal(signal.SIGINT, self._previous_handler or signal.default_int_handler)
            raise TrainingAborted("a second Ctrl-C aborted training in the middle of a step",
                                  in_the_stops_checkpoint=self.writing_the_stops_checkpoint)
        self.requested = True
        if not self.training_started:
            rank_zero_info(f"Ctrl-C: stopping before the first {self.step_name} (Ctrl-C again to abort now).")
            return
        rank_zero_info(f"Ctrl-C: finishing this {self.step_name}, then writing a checkpoint (Ctrl-C again to abort "
                       f"now).")

    def on_sanity_check_start(self, trainer: L.Trainer, module) -> None:
        self.take_sigterm_from_lightning(trainer)

    def on_train_start(self, trainer: L.Trainer, module) -> None:
        sigint, sigterm = self.signalled_on_any_rank(trainer)
        if sigint or sigterm:  # during the set-up: nothing trained yet, nothing to save
            raise StoppedBeforeTraining("SIGTERM" if sigterm else "SIGINT")
        self.training_started = True
        self.take_sigterm_from_lightning(trainer)

    def take_sigterm_from_lightning(self, trainer: L.Trainer) -> None:
        """With several ranks, this callback's SIGTERM handler replaces Lightning's, which fit registered after
        on_fit_start (see the module doc); Lightning's teardown restores this one, this teardown the one before."""
        if trainer.world_size > 1 and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum, frame) -> None:
        if self._passed_back(signum, frame):
            return
        trainer = self._trainer
        if trainer is not None and trainer.world_size > 1:  # noted; the ranks agree in on_train_batch_end
            if not self.sigterm_noted and trainer.strategy.launcher is not None:
                trainer.strategy.launcher.kill(signum)  # to the ranks this process started, once
        # (with one rank, Lightning's handler ran before this one once training started: it stops training after this
        # step; before, on_train_start stops the run)
        self.sigterm_noted = True
        if callable(self._previous_sigterm):
            self._previous_sigterm(signum, frame)  # the handler before fit's
        what = None if self.training_finished else abandon_waiting_call()
        if what is not None:  # this step may never end: abandon the call
            rank_zero_info(f"SIGTERM while waiting on {what}: the call is abandoned.")
            raise CallAbandoned(what)

    def on_train_batch_start(self, trainer: L.Trainer, module, *args) -> None:
        self._optimizer_steps_before = trainer.global_step

    def on_train_batch_end(self, trainer: L.Trainer, module, *args) -> None:
        sigint, sigterm = self.signalled_on_any_rank(trainer)
        if (sigint or sigterm) and self.accumulating(trainer, module):
            # a batch whose gradients wait for the next ones (accumulate_grad_batches): stopped here, the resumed fit
            # would start a new sum without them; the stop comes at the optimizer step that ends the sum
            trainer._signal_connector.received_sigterm = False
            return
        if sigterm:  # Lightning raises SIGTERMException at the end of this step on every rank; on_exception saves
            trainer._signal_connector.received_sigterm = True  # what Lightning's own handler sets
        elif sigint:
            self.writing_the_stops_checkpoint = True  # a second Ctrl-C now aborts the write, the previous file kept
            try:
                self.save(trainer)
            finally:
                self.writing_the_stops_checkpoint = False
            self.stopped_by = "SIGINT"  # written: a further Ctrl-C cuts short what is left of the fit
            self.end_the_epoch_after_this_step(trainer)

    def end_the_epoch_after_this_step(self, trainer: L.Trainer) -> None:
        """Ends the fit after this step, which runs the held-out evaluation only where one is due. Lightning evaluates
        whenever `should_stop` is set (for EarlyStopping): an evaluation the uninterrupted run does not have, and
        minutes long on a large held-out set. A step limit at this step ends the epoch instead; on_train_epoch_end
        puts the limit back and sets `should_stop`, which ends the fit (Lightning would say the limit was reached)."""
        self._max_steps_before_stop = trainer.fit_loop.epoch_loop.max_steps
        trainer.fit_loop.epoch_loop.max_steps = trainer.global_step

    def on_train_epoch_end(self, trainer: L.Trainer, module) -> None:
        if self._max_steps_before_stop is not None:
            self.put_the_step_limit_back(trainer)
            trainer.should_stop = True

    def put_the_step_limit_back(self, trainer: L.Trainer) -> None:
        if self._max_steps_before_stop is not None:
            trainer.fit_loop.epoch_loop.max_steps = self._max_steps_before_stop
            self._max_steps_before_stop = None

    def accumulating(self, trainer: L.Trainer, module) -> bool:
        """Whether this batch's gradients were summed without an optimizer step (automatic optimization)."""
        return (module.automatic_optimization and trainer.accumulate_grad_batches > 1
                and trainer.global_step == self._optimizer_steps_before)

    def on_validation_batch_end(self, trainer: L.Trainer, module, *args) -> None:
        # an evaluation within fit stops at the next batch once a rank is signalled, as with one rank Lightning's check
        # does (then the step's end saves): without this, the ranks would agree only after the next step
        if trainer.world_size > 1 and trainer.state.fn == TrainerFn.FITTING and self.signalled_on_any_rank(trainer)[1]:
            trainer._signal_connector.received_sigterm = True

    def signalled_on_any_rank(self, trainer: L.Trainer) -> tuple[bool, bool]:
        """(Ctrl-C, SIGTERM) noted on any rank: one all-reduce a step with several ranks."""
        if trainer.world_size == 1:
            return self.requested, self.sigterm_noted
        noted = torch.tensor([self.requested, self.sigterm_noted], dtype=torch.int32)
        total = trainer.strategy.reduce(noted.to(trainer.strategy.root_device), reduce_op="sum")
        return bool(total[0]), bool(total[1])

    def on_exception(self, trainer: L.Trainer, module, exception: BaseException) -> None:
        try:
            if isinstance(exception, SIGTERMException) and self.path is None:
                self.stopped_by = getattr(exception, "signal_name", "SIGTERM")
                if self.training_started:  # before, the weights may not even be restored from ckpt_path yet
                    self.save(trainer)
                if isinstance(exception, CallAbandoned):  # after a complete step, or within one (it runs again)
                    exception.in_evaluation = trainer.validating
        finally:
            self.put_the_step_limit_back(trainer)
            # Lightning calls no teardown when fit raises, and its own then puts these handlers back: once the fit is
            # over they pass each signal on to the handler from before the fit
            self._handed_back = {sig: handler for sig, handler in ((signal.SIGINT, self._previous_handler),
                                                                   (signal.SIGTERM, self._previous_sigterm))
                                 if handler is not None}
            self.teardown(trainer, module, "fit")

    def _passed_back(self, signum: int, frame) -> bool:
        """After a fit that raised: the handler from before the fit handles this signal, and is reinstated when this
        one is still installed (not when a later fit's handler calls this one as the handler before it)."""
        handler = self._handed_back.get(signum)
        if handler is None:
            return False
        installed = signal.getsignal(signum) in (self._on_sigint, self._on_sigterm)
        if installed:
            signal.signal(signum, handler)
        if callable(handler):
            handler(signum, frame)
        elif handler == signal.SIG_DFL and installed:
            os.kill(os.getpid(), signum)  # the default action, reinstated
        return True

    def teardown(self, trainer: L.Trainer, module, stage: str) -> None:
        """Gives Ctrl-C and SIGTERM back to the handlers they had before the fit."""
        if threading.current_thread() is threading.main_thread():
            if self._previous_handler is not None:
                signal.signal(signal.SIGINT, self._previous_handler)
            if self._previous_sigterm is not None:
                signal.signal(signal.SIGTERM, self._previous_sigterm)
        self._previous_handler = self._previous_sigterm = self._trainer = None

    def save(self, trainer: L.Trainer) -> None:
        checkpoint = trainer.checkpoint_callback
        directory = Path(self.dirpath or (checkpoint.dirpath if checkpoint and checkpoint.dirpath else
                                          Path(trainer.default_root_dir) / "checkpoints"))
        self.path = directory / self.filename
        # the whole training state (optimizer, callbacks, loops), as ModelCheckpoint writes it; left unset, Lightning
        # says "`weights_only` was not set", which reads like unrestricted loading (every load here is weights-only)
        trainer.save_checkpoint(self.path, weights_only=False)
        rank_zero_info(f"Checkpoint written: {self.path}\nResume with: {self.resume_hint(self.path)}")


def library_resume_hint(path: Path) -> str:
    return f"trainer.fit(module, datamodule, ckpt_path={str(path)!r}, weights_only=True)"


def stop_requested(trainer: L.Trainer) -> bool:
    """Ctrl-C or SIGTERM reached this run (any rank: a collective with several ranks, so every rank calls it at the
    same point): work due at the step's end that may take long (held-out samples) skips itself, so that the
    checkpoint comes first. Without CheckpointOnInterrupt, Lightning's SIGTERM flag alone."""
    callback = next((c for c in trainer.callbacks if isinstance(c, CheckpointOnInterrupt)), None)
    noted = callback is not None and any(callback.signalled_on_any_rank(trainer))
    return noted or trainer.received_sigterm


@contextmanager
def stops_before_training_said(trainer: L.Trainer) -> Iterator[None]:
    """Around trainer.fit: a SIGTERM that stopped the run before its first step began (no checkpoint was written:
    nothing had been trained; an abandoned call's CallAbandoned included) leaves as StoppedBeforeTraining, as a
    Ctrl-C then does. So does a Ctrl-C in the fit's first moments, before CheckpointOnInterrupt listens (Lightning's
    launch, the other callbacks' set-up), which Lightning's own handling ended with exit code 1 and no record."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        def before_the_first_step(signum, frame):
            if trainer.global_step == 0:
                raise StoppedBeforeTraining("SIGINT")
            raise KeyboardInterrupt  # without CheckpointOnInterrupt, after a step: as before

        previous = signal.signal(signal.SIGINT, before_the_first_step)
    try:
        yield
    except SIGTERMException as err:
        stopped = stopped_by_interrupt(trainer)
        if isinstance(err, StoppedBeforeTraining) or stopped is None or stopped.path is not None:
            raise
        raise StoppedBeforeTraining("SIGTERM", err.what if isinstance(err, CallAbandoned) else None) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def stopped_by_interrupt(trainer: L.Trainer) -> CheckpointOnInterrupt | None:
    """The trainer's CheckpointOnInterrupt when Ctrl-C or SIGTERM stopped its training, else None."""
    return next((c for c in trainer.callbacks if isinstance(c, CheckpointOnInterrupt) and c.stopped_by), None)
