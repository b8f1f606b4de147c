"""KLController: the KL coefficient, fixed or adaptive (Ziegler et al. 2019).

Adaptive, after every RL step with mean KL `kl` over `n_steps` episodes:
    e = clip(kl / target - 1, -0.2, 0.2);  kl_coef *= 1 + e * n_steps / horizon
the rule of TRL's legacy AdaptiveKLController, OpenRLHF and verl. The module reads
`module.kl_coef` at every step and logs it as objective/kl_coef; the coefficient is saved in and
restored from Lightning checkpoints.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch

from lit_rlhf.errors import ConfigError

KINDS = ("fixed", "adaptive")


def adaptive_kl_update(kl_coef: float, kl: float, n_steps: int, target: float, horizon: int) -> float:
    proportional_error = min(max(kl / target - 1, -0.2), 0.2)
    return kl_coef * (1 + proportional_error * n_steps / horizon)


class KLController(L.Callback):
    def __init__(self, kind: str = "fixed", init_kl_coef: float | None = None, target: float = 6.0,
                 horizon: int = 10000):
        if kind not in KINDS:
            raise ConfigError(f"callbacks.kl_controller.kind={kind!r} is not one of {KINDS}.")
        if target <= 0 or horizon <= 0:
            raise ConfigError(f"KLController needs target > 0 and horizon > 0 (got {target}, {horizon}).")
        self.kind, self.init_kl_coef, self.target, self.horizon = kind, init_kl_coef, target, horizon
        self.kl_coef: float | None = None  # the current value, once training started or a checkpoint loaded

    def on_fit_start(self, trainer: L.Trainer, module) -> None:
        if self.kl_coef is None:
            self.kl_coef = module.kl_coef if self.init_kl_coef is None else float(self.init_kl_coef)
        module.kl_coef = self.kl_coef

    def on_train_batch_end(self, trainer: L.Trainer, module, *args) -> None:
        if self.kind == "adaptive":
            # every rank steers on the mean KL of all ranks, so kl_coef stays one value (and resumes as one)
            local_kl = torch.tensor(module.last_stats["objective/kl"], dtype=torch.float64, device=module.device)
            kl = float(trainer.strategy.reduce(local_kl, reduce_op="mean"))
            self.kl_coef = adaptive_kl_update(module.kl_coef, kl, module.last_step_episodes, self.target,
                                              self.horizon)
            module.kl_coef = self.kl_coef

    def state_dict(self) -> dict[str, Any]:
        return {"kl_coef": self.kl_coef}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.kl_coef = state["kl_coef"]
