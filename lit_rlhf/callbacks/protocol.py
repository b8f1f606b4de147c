"""What a callback may read from an RLHF module: the declared interface between the two.

The module owns everything that changes the training maths (its rollout engine, KL controller and score
transforms are constructor arguments). Callbacks observe: they read the attributes below, call
`sample_heldout` for held-out completions (which leaves the training random state alone), and never
touch private attributes. A callback written against RLHFModuleView works with every algorithm.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class RLHFModuleView(Protocol):
    rl_step: int  # RL steps done (a resumed run continues the count)
    episode: int  # sequences trained on, over all ranks
    last_stats: dict[str, float]  # the last RL step's logged metrics (objective/*, policy/*, val/*, ...)
    last_step_episodes: int  # sequences in the last RL step, over all ranks
    last_distributions: dict[str, torch.Tensor]  # per-sequence / per-token values of the last step (histograms)
    heldout_before_training: dict[str, float] | None  # eval/* of the starting policy (fresh runs)
    training_finished: bool  # the final checkpoint is written; what runs now is reporting
    kl_coef: float  # the KL coefficient in use (the module's KL controller's)
    rollout_engine: Any  # how responses are sampled; `lockstep` says whether all ranks must sample together
    tokenizer: Any
    task_metrics: list  # the module's task metrics (e.g. ExactMatch), logged as eval/<name>
    hparams: Any  # the algorithm's settings (RLOOConfig / PPOConfig fields) and `model`
    device: torch.device

    def total_rl_steps(self) -> int | None:
        """The RL steps this fit runs (None when unbounded)."""

    def sample_heldout(self, batch: dict[str, torch.Tensor], seed: int, greedy: bool = False,
                       samples_per_prompt: int = 1, from_reference: bool = False) -> dict[str, Any]:
        """Completions of held-out prompts under a fixed seed, scored, with their KL."""

    def ranks_stepping_together(self) -> Any:
        """A context manager around a sample_heldout that every rank calls: a call abandoned on SIGTERM on one rank
        stops them all."""
