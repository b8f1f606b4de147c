"""lit_rlhf: RLHF of causal language models with PyTorch Lightning."""

from lit_rlhf.algos import PPOModule, RLHFModule, RLOOModule
from lit_rlhf.data import PromptDataModule

__all__ = ["PPOModule", "PromptDataModule", "RLHFModule", "RLOOModule"]
__version__ = "0.1.0"
