"""lit_rlhf: RLHF of causal language models with PyTorch Lightning.

Where to start:

- From the command line: `python train.py` (RL on the embedded default), `python evaluate.py ckpt_path=...`,
  `python train_reward_model.py`, `python train_dpo.py`; README.md in the repository, and its docs/ folder
  (algorithms.md, configuration.md, rewards.md, metrics.md, ...).
- From Python: the LightningModules RLOOModule, GRPOModule, ReinforcePPModule, PPOModule (RL), RewardModelModule
  and DPOModule (preference pairs), with PromptDataModule or PreferenceDataModule, under a Lightning Trainer. Their
  settings are the fields of the dataclasses in lit_rlhf.config (RLOOConfig, GRPOConfig, PPOConfig, ...), given as
  keyword arguments; help(lit_rlhf.config.RLOOConfig) lists them with their defaults.
"""

from lit_rlhf.algos import GRPOModule, PPOModule, ReinforcePPModule, RLHFModule, RLOOModule
from lit_rlhf.algos.dpo import DPOModule
from lit_rlhf.algos.reward_model import RewardModelModule
from lit_rlhf.data import PromptDataModule
from lit_rlhf.data.preference_datamodule import PreferenceDataModule

__all__ = ["DPOModule", "GRPOModule", "PPOModule", "PreferenceDataModule", "PromptDataModule", "RLHFModule",
           "RLOOModule", "ReinforcePPModule", "RewardModelModule"]
__version__ = "0.1.0"
