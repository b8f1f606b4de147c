"""CheckpointOnInterrupt: Ctrl-C or SIGTERM ends the run with a checkpoint to resume from.

Ctrl-C (SIGINT) no longer stops a step halfway through its updates: the first one finishes the
current RL step, writes <checkpoints>/interrupted.ckpt and ends fit (summaries included, the end-of-run
evaluation skipped; train.py then exits 130 with the run recorded as interrupted); a second one aborts at
once. SIGTERM (a scheduler's preemption) goes through Lightning, which stops after the current step on every
rank; the checkpoint is written then, or at once when the main thread waits on a call that may never return (a
reward, a tool, the async producer: `abandonable`), which is abandoned. After training has finished
(the final checkpoint is written), Ctrl-C stops the end-of-run reports at once (EndOfRunInterrupted).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_rlhf.interrupts import CallAbandoned, EndOfRunInterrupted, TrainingAborted, waiting_on


class CheckpointOnInterrupt(Checkpoint):
    """A `Checkpoint`, so Lightning runs it after every other callback: the state it saves includes
    what they updated at the end of the step (KL coefficient, normalizer moments)."""

    def __init__(self, dirpath: str | None = None, filename: str = "interrupted.ckpt", step_name: str = "RL step"):
        self.dirpath, self.filename = dirpath, filename
        self.step_name = step_name  # what its messages call a step: an RL step, or a training step of an offline fit
        # how to resume from the checkpoint, printed with it: train.py sets its own command line + ckpt_path
        self.resume_hint: Callable[[Path], str] = library_resume_hint
        self.stopped_by: str | None = None  # SIGINT or SIGTERM, once it stopped training
        self.requested = False
        self.training_finished = False
        self.path: Path | None = None
        self._previous_handler = None
        self._previous_sigterm = None

    def on_fit_start(self, trainer: L.Trainer, module) -> None:
        self.requested, self.path, self.training_finished, self.stopped_by = False, None, False, None
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGINT, self._on_sigint)
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)  # after Lightning's

    def on_train_end(self, trainer: L.Trainer, module) -> None:
        self.training_finished = True  # the final checkpoint is written: Ctrl-C now skips the reports

    def _on_sigint(self, signum, frame) -> None:
        if self.training_finished:
            raise EndOfRunInterrupted("SIGINT")
        if self.requested:  # second Ctrl-C: abort now
            signal.signal(signal.SIGINT, self._previous_handler or signal.default_int_handler)
            raise TrainingAborted("a second Ctrl-C aborted training in the middle of a step")
        self.requested = True
        rank_zero_info(f"Ctrl-C: finishing this {self.step_name}, then writing a checkpoint (Ctrl-C again to abort "
                       f"now).")

    def _on_sigterm(self, signum, frame) -> None:
        previous = self._previous_sigterm
        if callable(previous):
            previous(signum, frame)  # Lightning's: stop after this step on every rank
        what = waiting_on()
        if what is not None and not self.training_finished:  # this step may never end: abandon the call
            rank_zero_info(f"SIGTERM while waiting on {what}: the call is abandoned.")
            raise CallAbandoned(what)

    def on_train_batch_end(self, trainer: L.Trainer, module, *args) -> None:
        if trainer.strategy.reduce_boolean_decision(self.requested, all=False):  # any rank asked
            self.stopped_by = "SIGINT"
            self.save(trainer)
            trainer.should_stop = True

    def on_exception(self, trainer: L.Trainer, module, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and self.path is None:
            self.stopped_by = "SIGTERM"
            self.save(trainer)

    def teardown(self, trainer: L.Trainer, module, stage: str) -> None:
        if threading.current_thread() is threading.main_thread():
            if self._previous_handler is not None:
                signal.signal(signal.SIGINT, self._previous_handler)
            if self._previous_sigterm is not None:
                signal.signal(signal.SIGTERM, self._previous_sigterm)
        self._previous_handler = self._previous_sigterm = None

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


def stopped_by_interrupt(trainer: L.Trainer) -> CheckpointOnInterrupt | None:
    """The trainer's CheckpointOnInterrupt when Ctrl-C or SIGTERM stopped its training, else None."""
    return next((c for c in trainer.callbacks if isinstance(c, CheckpointOnInterrupt) and c.stopped_by), None)
