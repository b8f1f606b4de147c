"""lit_rlhf: RLHF of causal language models with PyTorch Lightning."""

from lit_rlhf.algos import GRPOModule, PPOModule, ReinforcePPModule, RLHFModule, RLOOModule
from lit_rlhf.data import PromptDataModule

__all__ = ["GRPOModule", "PPOModule", "PromptDataModule", "RLHFModule", "RLOOModule", "ReinforcePPModule"]
__version__ = "0.1.0"
