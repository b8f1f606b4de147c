"""KLController: the KL coefficient, fixed or adaptive (Ziegler et al. 2019), owned by the RLHF module.

Adaptive, after every RL step with mean KL `kl` (over all ranks) over `n_steps` episodes:
    e = clip(kl / target - 1, -0.2, 0.2);  kl_coef *= 1 + e * n_steps / horizon
the rule of TRL's legacy AdaptiveKLController, OpenRLHF and verl. The module passes it in its
constructor (`kl_controller=`), reads `kl_coef` at every step, logs it as objective/kl_coef and saves
the controller's state in its checkpoint: the coefficient lives in one place. The controller also turns a
rollout's logprobs into the per-token KL and its penalty (`penalty`, a KLPenalty), which an RL step computes once and
hands to the advantages, the histograms and the controller's own update (`steer`).

Shapes: N sequences, R response length.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from lit_rlhf.config.validation import check_choice, check_number, is_number
from lit_rlhf.errors import ConfigError
from lit_rlhf.ops import kl_per_token

if TYPE_CHECKING:
    from lit_rlhf.step.rollout import Rollout

KINDS = ("fixed", "adaptive")


@dataclass(frozen=True)
class KLPenalty:
    """An RL step's per-token KL to the reference and its penalty, zero after the stop; kl is None without a
    reference forward (the penalty is then zero)."""

    kl: torch.Tensor | None  # N,R
    non_score_reward: torch.Tensor  # N,R: -kl_coef * kl

    def mean_sequence_kl(self) -> torch.Tensor | None:
        """The mean over sequences of each one's summed KL: objective/kl, what the adaptive controller steers on."""
        return None if self.kl is None else self.kl.sum(1).mean()


def adaptive_kl_update(kl_coef: float, kl: float, n_steps: int, target: float, horizon: int) -> float:
    proportional_error = min(max(kl / target - 1, -0.2), 0.2)
    return kl_coef * (1 + proportional_error * n_steps / horizon)


class KLController:
    def __init__(self, kind: str = "fixed", init_kl_coef: float | None = None, target: float = 6.0,
                 horizon: int = 10000):
        check_choice("kl_controller.kind", kind, KINDS)
        # a negative coefficient would reward KL; text failed at the first RL step
        if init_kl_coef is not None and not (is_number(init_kl_coef) and 0 <= init_kl_coef < math.inf):
            raise ConfigError(f"algo.kl_controller.init_kl_coef={init_kl_coef!r} must be a finite number >= 0, or null "
                              f"(the coefficient starts at algo.kl_coef).")
        check_number("kl_controller.target", target, 0, strictly=True)
        check_number("kl_controller.horizon", horizon, 0, strictly=True)
        self.kind, self.init_kl_coef, self.target, self.horizon = kind, init_kl_coef, target, horizon
        self.kl_coef: float | None = None
        self.estimator = "k1"

    def start(self, kl_coef: float, estimator: str = "k1") -> None:
        """The starting coefficient: init_kl_coef, else the algorithm's kl_coef; estimator: algo.kl_estimator."""
        self.kl_coef = float(kl_coef if self.init_kl_coef is None else self.init_kl_coef)
        self.estimator = estimator

    @property
    def uses_reference(self) -> bool:
        """Whether training needs the reference: not with a fixed kl_coef of 0 (no reference forward, no
        objective/kl; held-out evaluation still measures the KL)."""
        return self.kind != "fixed" or self.kl_coef > 0

    def penalty(self, rollout: Rollout) -> KLPenalty:
        """Per-token KL to the reference and the penalty -kl_coef * KL, zero after the stop (N,R each).
        Without a reference forward (uses_reference): no KL (None) and no penalty."""
        if rollout.ref_logprobs is None:
            return KLPenalty(None, torch.zeros_like(rollout.logprobs))
        kl = kl_per_token(rollout.logprobs, rollout.ref_logprobs, self.estimator) * rollout.response_mask  # N,R
        return KLPenalty(kl, -self.kl_coef * kl)

    def steer(self, penalty: KLPenalty, n_steps: int, rank_mean: Callable[[torch.Tensor], float]) -> None:
        """After an RL step: the adaptive coefficient moves on the step's mean sequence KL over all ranks, so every
        rank keeps the same coefficient (rank_mean reduces and reads it: only here, so a fixed coefficient costs no
        collective and no host read)."""
        if self.kind == "adaptive" and penalty.kl is not None:
            self.update(rank_mean(penalty.mean_sequence_kl()), n_steps)

    def update(self, kl: float, n_steps: int) -> float:
        """After an RL step whose mean KL (over all ranks) was kl, over n_steps episodes."""
        if self.kind == "adaptive":
            self.kl_coef = adaptive_kl_update(self.kl_coef, kl, n_steps, self.target, self.horizon)
        return self.kl_coef

    def state_dict(self) -> dict[str, Any]:
        return {"kl_coef": self.kl_coef}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.kl_coef = state["kl_coef"]
