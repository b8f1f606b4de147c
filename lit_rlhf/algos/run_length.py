"""How many RL steps a fit runs: the module's rl_steps; else the Trainer's limits (max_steps, which counts optimizer
steps, num_ppo_epochs x num_mini_batches per RL step; an int limit_train_batches x max_epochs); else until something
stops it, since the prompt stream is endless."""

from __future__ import annotations

import math

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


def finished_fit_line(rl_step: int, rl_steps: int | None) -> str | None:
    """The notice for a resume from the end of a finished run (rl_steps RL steps already done): nothing is trained."""
    if rl_steps is None or rl_step < rl_steps:
        return None
    return (f"The checkpoint is at RL step {rl_step} of {rl_steps}: nothing is left to train (raise steps= to train on "
            f"from it).")
