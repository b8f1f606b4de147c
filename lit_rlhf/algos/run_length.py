"""How many RL steps a fit runs: the module's rl_steps; else the Trainer's limits (max_steps, which counts optimizer
steps, num_ppo_epochs x num_mini_batches per RL step; an int limit_train_batches x max_epochs); else until something
stops it, since the prompt stream is endless."""

from __future__ import annotations

import math
from datetime import timedelta

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, Timer


def rl_steps_of_fit(rl_steps: int | None, trainer: L.Trainer | None, optimizer_steps_per_rl_step: int) -> int | None:
    """The RL steps a fit runs (None: no limit): the fewest that rl_steps and the Trainer's limits allow. Lightning
    checks max_steps between RL steps, so a max_steps that is no multiple of the optimizer steps per RL step runs one
    RL step past its floor: ceil(max_steps / that). An int limit_train_batches ends each epoch after that many RL steps
    (max_epochs of them; -1: endless)."""
    if trainer is None:
        return rl_steps
    limits = [] if rl_steps is None else [rl_steps]
    if trainer.max_steps is not None and trainer.max_steps >= 0:  # Lightning's -1: no limit
        limits.append(math.ceil(trainer.max_steps / optimizer_steps_per_rl_step))
    batches, epochs = trainer.limit_train_batches, trainer.max_epochs
    if isinstance(batches, int) and not isinstance(batches, bool) and epochs is not None and epochs >= 0:
        limits.append(batches * epochs)
    return min(limits, default=None)


def endless_fit_line(trainer: L.Trainer, total_rl_steps: int | None) -> str | None:
    """The warning for a fit that nothing stops: no limit in RL steps, optimizer steps or batches per epoch, no max_time
    (Lightning's Timer callback) and no EarlyStopping. Lightning's own "max_epochs was not set" would not say it: an
    epoch of the endless prompt stream never ends."""
    if total_rl_steps is not None or any(isinstance(c, (Timer, EarlyStopping)) for c in trainer.callbacks):
        return None
    return ("This fit has no length: neither the module's rl_steps nor the Trainer's max_steps or max_time is set, and "
            "the prompt stream is endless (an epoch of it never ends), so it trains until stopped; give the module "
            "rl_steps=N (RL steps), or the Trainer max_steps=N x num_ppo_epochs x num_mini_batches (optimizer steps).")


def time_limit(trainer: L.Trainer) -> Timer | None:
    """The Timer that the Trainer's max_time (or one passed as a callback) stops the fit with; None without one."""
    return next((c for c in trainer.callbacks if isinstance(c, Timer) and c.time_remaining() is not None), None)


def as_duration(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))


def finished_fit_line(rl_step: int, rl_steps: int | None, resumed: bool) -> str | None:
    """The notice for a fit that starts with its rl_steps RL steps already done, so trains nothing: a resume from the
    end of a finished run (resumed), or a second fit of a module already trained."""
    if rl_steps is None or rl_step < rl_steps:
        return None
    if resumed:
        return (f"The checkpoint is at RL step {rl_step} of {rl_steps}: nothing is left to train (raise steps= on the "
                f"command line, the module's rl_steps in Python, to train on from it).")
    return (f"This module is already at RL step {rl_step} of its rl_steps={rl_steps}: nothing is left to train (to "
            f"train on, fit a module with a larger rl_steps from this run's checkpoint: ckpt_path=...).")


def time_limit_stop_line(trainer: L.Trainer, rl_step: int, total_rl_steps: int | None,
                         step_name: str = "RL step") -> str | None:
    """After a fit: the line saying that the Trainer's max_time stopped it before its last RL step (step_name: the
    unit the fit counts, e.g. an offline fit's "training step"), or None. Lightning's Timer saves the time trained in
    checkpoints and counts it across resumes: a resume with the same max_time stops before its first step, with this
    line again."""
    timer = time_limit(trainer)
    if timer is None or timer.time_remaining() > 0 or (total_rl_steps is not None and rl_step >= total_rl_steps):
        return None
    limit = as_duration(timer.time_elapsed() + timer.time_remaining())
    return (f"The Trainer's max_time ({limit}) stopped the run after {step_name} {rl_step} of {total_rl_steps or '?'}; "
            f"the time trained counts against max_time on a resume (Lightning's Timer)")
