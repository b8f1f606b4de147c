"""The typed settings of lit_rlhf.config, registered with Hydra's ConfigStore: conf/ files choose and
override, the dataclasses define every key, its type and its default (for Python users too)."""

from dataclasses import field, make_dataclass
from typing import Any

from hydra.core.config_store import ConfigStore

from lit_rlhf.config import (
    DataConfig,
    DistillationConfig,
    GRPOConfig,
    ModelConfig,
    PPOConfig,
    ReinforcePPConfig,
    RLOOConfig,
)

MODULE_ARGUMENTS = ("model", "reward", "optimizer", "lr_scheduler", "rollout_engine", "kl_controller",
                    "score_transforms", "task_metrics", "environment")


def schema(settings: type, target: str, arguments: tuple[str, ...] = ()) -> type:
    """settings plus `_target_` and the constructor arguments that are not settings (any type)."""
    extra = [("_target_", str, field(default=target)), *[(name, Any, field(default=None)) for name in arguments]]
    return make_dataclass(f"{settings.__name__}Schema", extra, bases=(settings,))


def register_configs() -> None:
    store = ConfigStore.instance()
    if "rloo_schema.yaml" in store.repo.get("algo", {}):  # an app already ran in this process (a notebook, a test)
        return
    for name, settings, target in (("rloo_schema", RLOOConfig, "lit_rlhf.algos.RLOOModule"),
                                   ("ppo_schema", PPOConfig, "lit_rlhf.algos.PPOModule"),
                                   ("grpo_schema", GRPOConfig, "lit_rlhf.algos.GRPOModule"),
                                   ("reinforce_pp_schema", ReinforcePPConfig, "lit_rlhf.algos.ReinforcePPModule"),
                                   ("distill_schema", DistillationConfig, "lit_rlhf.algos.DistillationModule")):
        arguments = MODULE_ARGUMENTS + (("teacher",) if settings is DistillationConfig else ())
        store.store(group="algo", name=name, node=schema(settings, target, arguments))
    store.store(group="model", name="schema", node=ModelConfig)
    store.store(group="data", name="schema", node=schema(DataConfig, "lit_rlhf.data.PromptDataModule"))
