"""The guard of an optimizer step: a step whose loss or gradients are not finite on some rank is skipped and
counted, and too many in a row stop the run, so that the weights (and every checkpoint) stay finite."""

from __future__ import annotations

from collections.abc import Callable

import torch
from lightning.pytorch.utilities import rank_zero_warn

from lit_rlhf.distributed.sharding import local_tensor
from lit_rlhf.errors import ConfigError
from lit_rlhf.ops.finite import all_finite


class NonfiniteGuard:
    def __init__(self) -> None:
        self.skipped_updates = 0  # optimizer steps skipped, in total (policy/skipped_updates; checkpointed)
        self.consecutive_skipped = 0
        self.taken_updates = 0  # optimizer steps taken by this process's fit (not checkpointed)

    def step_is_finite(self, loss_finite: torch.Tensor, parameters: list[torch.nn.Parameter], strategy,
                       rl_step: int, max_consecutive: int, cause: Callable[[], str | None] = lambda: None) -> bool:
        """True when the loss (loss_finite: a bool tensor) and the gradients of parameters are finite on every rank
        (strategy: the Trainer's, or None outside one): one host read per optimizer step. Otherwise the step is
        to be skipped, and it is counted; after max_consecutive (algo.max_consecutive_nonfinite) in a row the run
        stops with a one-line error, which names `cause()` when it knows one (e.g. a teacher's non-finite logprobs)."""
        grads = [p.grad for p in parameters if p.grad is not None]
        finite = all_finite([local_tensor(g) for g in grads], also=loss_finite)  # a rank's shard
        if strategy is not None:
            finite = strategy.reduce_boolean_decision(finite, all=True)
        if finite:
            self.consecutive_skipped = 0
            self.taken_updates += 1
            return True
        self.skipped_updates += 1
        self.consecutive_skipped += 1
        rank_zero_warn(f"RL step {rl_step}: non-finite loss or gradient, optimizer step skipped "
                       f"({self.consecutive_skipped} in a row).")
        if self.consecutive_skipped >= max_consecutive:
            if known := cause():
                raise ConfigError(f"stopped at RL step {rl_step}: {known}; {self.consecutive_skipped} optimizer steps "
                                  f"in a row were skipped (no weight was changed by them).")
            raise ConfigError(f"stopped at RL step {rl_step}: {self.consecutive_skipped} optimizer steps in a row "
                              f"had a non-finite loss or gradient (no weight was changed by them); lower "
                              f"algo.optimizer.lr, check the reward, or raise algo.max_consecutive_nonfinite.")
        return False

    def nothing_trained_line(self) -> str | None:
        """At the end of a fit whose every optimizer step was skipped: the line that says why the weights did not
        move (a run shorter than algo.max_consecutive_nonfinite steps ends without the error)."""
        if self.taken_updates or not self.consecutive_skipped:
            return None
        return (f"every optimizer step of this run was skipped ({self.consecutive_skipped}: non-finite loss or "
                f"gradient), so the weights did not change; lower algo.optimizer.lr, check the reward and the "
                f"advantage's coefficients.")
