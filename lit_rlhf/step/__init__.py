"""The parts of an RL step that are not the LightningModule's own, in the order a step uses them:

- Rollout (rollout.py): the step's record of N episodes, built once from the Sampler's draw.
- ScoreTransform, ScoreContext, RewardNormalizer (score_transforms.py): what turns rewards into the scores trained on.
- KLController, KLPenalty (kl_controller.py): the per-token KL penalty, its coefficient and how it is steered.
- EntropyController (entropy_controller.py): GRPO's entropy-bonus coefficient, fixed or adaptive.
- estimate_advantages (episodes.py): advantages per episode, for multi-turn rollouts.
- NonfiniteGuard (nonfinite.py): a step whose loss or gradients are not finite is skipped, counted and reported.
- ModelSharding (model_sharding.py): how a module meets Lightning's strategy (FSDP2 sharding of its models, sampling
  in lockstep, weights-only checkpoint files).
- refill rounds (refill.py): DAPO's dynamic sampling for GRPO, more prompts until the step holds enough informative
  groups.
- has_active_dropout (dropout.py): whether the rollout's forward can also be the update's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_rlhf.lazy_exports import lazy_exports

_EXPORTS = {"Rollout": "lit_rlhf.step.rollout", "KLController": "lit_rlhf.step.kl_controller",
            "KLPenalty": "lit_rlhf.step.kl_controller", "adaptive_kl_update": "lit_rlhf.step.kl_controller",
            "RewardNormalizer": "lit_rlhf.step.score_transforms", "ScoreContext": "lit_rlhf.step.score_transforms",
            "ScoreTransform": "lit_rlhf.step.score_transforms"}
__all__ = ["KLController", "KLPenalty", "RewardNormalizer", "Rollout", "ScoreContext", "ScoreTransform",
           "adaptive_kl_update"]  # = _EXPORTS

if TYPE_CHECKING:
    from lit_rlhf.step.kl_controller import KLController, KLPenalty, adaptive_kl_update
    from lit_rlhf.step.rollout import Rollout
    from lit_rlhf.step.score_transforms import RewardNormalizer, ScoreContext, ScoreTransform

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
