"""lit_rlhf: RLHF of causal language models with PyTorch Lightning."""

from lit_rlhf.algos import GRPOModule, PPOModule, ReinforcePPModule, RLHFModule, RLOOModule
from lit_rlhf.algos.dpo import DPOModule
from lit_rlhf.algos.reward_model import RewardModelModule
from lit_rlhf.data import PromptDataModule
from lit_rlhf.data.preference_datamodule import PreferenceDataModule

__all__ = ["DPOModule", "GRPOModule", "PPOModule", "PreferenceDataModule", "PromptDataModule", "RLHFModule",
           "RLOOModule", "ReinforcePPModule", "RewardModelModule"]
__version__ = "0.1.0"
