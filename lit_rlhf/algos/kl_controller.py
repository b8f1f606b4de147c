"""KLController: the KL coefficient, fixed or adaptive (Ziegler et al. 2019), owned by the RLHF module.

Adaptive, after every RL step with mean KL `kl` (over all ranks) over `n_steps` episodes:
    e = clip(kl / target - 1, -0.2, 0.2);  kl_coef *= 1 + e * n_steps / horizon
the rule of TRL's legacy AdaptiveKLController, OpenRLHF and verl. The module passes it in its
constructor (`kl_controller=`), reads `kl_coef` at every step, logs it as objective/kl_coef and saves
the controller's state in its checkpoint: the coefficient lives in one place.
"""

from __future__ import annotations

from typing import Any

from lit_rlhf.errors import ConfigError

KINDS = ("fixed", "adaptive")


def adaptive_kl_update(kl_coef: float, kl: float, n_steps: int, target: float, horizon: int) -> float:
    proportional_error = min(max(kl / target - 1, -0.2), 0.2)
    return kl_coef * (1 + proportional_error * n_steps / horizon)


class KLController:
    def __init__(self, kind: str = "fixed", init_kl_coef: float | None = None, target: float = 6.0,
                 horizon: int = 10000):
        if kind not in KINDS:
            raise ConfigError(f"algo.kl_controller.kind={kind!r} is not one of {KINDS}.")
        if target <= 0 or horizon <= 0:
            raise ConfigError(f"algo.kl_controller needs target > 0 and horizon > 0 (got {target}, {horizon}).")
        self.kind, self.init_kl_coef, self.target, self.horizon = kind, init_kl_coef, target, horizon
        self.kl_coef: float | None = None

    def start(self, kl_coef: float) -> None:
        """The starting coefficient: init_kl_coef, else the algorithm's kl_coef."""
        self.kl_coef = float(kl_coef if self.init_kl_coef is None else self.init_kl_coef)

    def update(self, kl: float, n_steps: int) -> float:
        """After an RL step whose mean KL (over all ranks) was kl, over n_steps episodes."""
        if self.kind == "adaptive":
            self.kl_coef = adaptive_kl_update(self.kl_coef, kl, n_steps, self.target, self.horizon)
        return self.kl_coef

    def state_dict(self) -> dict[str, Any]:
        return {"kl_coef": self.kl_coef}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.kl_coef = state["kl_coef"]
