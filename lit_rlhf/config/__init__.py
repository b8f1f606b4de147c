"""Typed settings, one source of defaults for Python users and the CLI (registered with Hydra by the app)."""

from lit_rlhf.config.algo import PPOConfig, ReinforcePPConfig, RLHFConfig, RLOOConfig
from lit_rlhf.config.data import DataConfig
from lit_rlhf.config.distillation import DistillationConfig
from lit_rlhf.config.grpo import GRPOConfig
from lit_rlhf.config.model import LoraSettings, ModelConfig, model_config
from lit_rlhf.config.settings import build, field_names, setting

__all__ = ["DataConfig", "DistillationConfig", "GRPOConfig", "LoraSettings", "ModelConfig", "PPOConfig", "RLHFConfig",
           "RLOOConfig", "ReinforcePPConfig", "build", "field_names", "model_config", "setting"]
