"""lit_rlhf: RLHF of causal language models with PyTorch Lightning.

Where to start:

- From the command line: `python train.py` (RL on the embedded default), `python evaluate.py ckpt_path=...`,
  `python train_reward_model.py`, `python train_dpo.py`, `python train_kto.py`, `python train_sft.py`; README.md in
  the repository, and its docs/ folder (algorithms.md, configuration.md, rewards.md, metrics.md, ...).
- From Python: the LightningModules RLOOModule, GRPOModule, ReinforcePPModule, PPOModule (RL), DistillationModule
  (on-policy distillation from a teacher), RewardModelModule
  and DPOModule (preference pairs), with PromptDataModule or PreferenceDataModule, under a Lightning Trainer. Their
  settings are the fields of the dataclasses in lit_rlhf.config (RLOOConfig, GRPOConfig, PPOConfig, ...), given as
  keyword arguments; help(lit_rlhf.config.RLOOConfig) lists them with their defaults.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_rlhf.lazy_exports import lazy_exports

_EXPORTS = {"DistillationModule": "lit_rlhf.algos", "GRPOModule": "lit_rlhf.algos", "PPOModule": "lit_rlhf.algos",
            "ReinforcePPModule": "lit_rlhf.algos", "RLHFModule": "lit_rlhf.algos", "RLOOModule": "lit_rlhf.algos",
            "DPOModule": "lit_rlhf.algos.dpo", "RewardModelModule": "lit_rlhf.algos.reward_model",
            "PromptDataModule": "lit_rlhf.data", "PreferenceDataModule": "lit_rlhf.data.preference_datamodule"}
__all__ = ["DPOModule", "DistillationModule", "GRPOModule", "PPOModule", "PreferenceDataModule", "PromptDataModule",
           "RLHFModule", "RLOOModule", "ReinforcePPModule", "RewardModelModule"]  # = _EXPORTS
__version__ = "0.1.0"

if TYPE_CHECKING:
    from lit_rlhf.algos import (
        DistillationModule,
        GRPOModule,
        PPOModule,
        ReinforcePPModule,
        RLHFModule,
        RLOOModule,
    )
    from lit_rlhf.algos.dpo import DPOModule
    from lit_rlhf.algos.reward_model import RewardModelModule
    from lit_rlhf.data import PromptDataModule
    from lit_rlhf.data.preference_datamodule import PreferenceDataModule


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
