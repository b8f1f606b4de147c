"""EntropyController: the coefficient of GRPO's entropy bonus (algo.entropy_coef), fixed or adaptive (Skywork-OR1's
adaptive entropy control, TRL's use_adaptive_entropy), owned by the module and saved in its checkpoints.

Adaptive, after every optimizer step with H the mean entropy of the tokens the bonus covered in the step's
micro-batches, over every rank (their entropy sums over their token counts):
    coef = min(coef + delta, coef_max) if H <= target else max(coef - delta, coef_min)
and the next optimizer step's loss subtracts coef x the bonus only if that H <= target (none before the first
measurement): TRL's rule.

Shapes: M sequences of a micro-batch, R response length.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from lit_rlhf.errors import ConfigError


class EntropyController:
    def __init__(self, coef: float, adaptive: bool = False, target: float = 0.2, delta: float = 0.005,
                 coef_min: float = 0.0, coef_max: float = 1.0):
        self.coef, self.adaptive, self.target, self.delta = coef, adaptive, target, delta
        self.coef_min, self.coef_max = coef_min, coef_max
        self.last_entropy = math.inf  # the last optimizer step's H; inf: none measured yet
        self.window: torch.Tensor | None = None  # [entropy sum, tokens] of this optimizer step's micro-batches so far

    @property
    def enabled(self) -> bool:
        """Whether the loss has the bonus: a coefficient, or one the controller may raise from 0."""
        return self.coef != 0 or self.adaptive

    def applied(self) -> float:
        """The coefficient this optimizer step's loss uses."""
        return self.coef if not self.adaptive or self.last_entropy <= self.target else 0.0

    def observe(self, entropy: torch.Tensor, mask: torch.Tensor) -> None:
        """A micro-batch's per-token entropy (M,R) over the tokens its bonus covers (mask, M,R)."""
        if self.adaptive:
            stats = torch.stack([(entropy.detach() * mask).sum(), mask.sum().to(entropy.dtype)])
            self.window = stats if self.window is None else self.window + stats

    def step(self, all_reduce_sum: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """At the end of an optimizer step: H over every rank's micro-batches, the coefficient's update."""
        if not self.adaptive or self.window is None:
            return
        totals = all_reduce_sum(self.window)
        self.window = None
        entropy = float(totals[0] / totals[1].clamp(min=1.0))  # one read per optimizer step
        if entropy <= self.target:
            self.coef = min(self.coef + self.delta, self.coef_max)
        else:
            self.coef = max(self.coef - self.delta, self.coef_min)
        self.last_entropy = entropy

    def state_dict(self) -> dict[str, float]:
        return {"coef": self.coef, "last_entropy": self.last_entropy}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        values = [state.get(name) for name in ("coef", "last_entropy")] if isinstance(state, dict) else [state] * 2
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) for v in values) \
                or not math.isfinite(values[0]):
            raise ConfigError(f"the checkpoint's rlhf_state.entropy_controller holds "
                              f"{', '.join(type(v).__name__ for v in values)}, not a coefficient and an entropy (the "
                              f"file is corrupted); use another checkpoint of the run.")
        self.coef, self.last_entropy = float(values[0]), float(values[1])
