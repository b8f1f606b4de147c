"""The typed settings of lit_rlhf.config, registered with Hydra's ConfigStore: conf/ files choose and
override, the dataclasses define every key, its type and its default (for Python users too)."""

from dataclasses import field, make_dataclass
from typing import Any

from hydra.core.config_store import ConfigStore

from lit_rlhf.config import DataConfig, ModelConfig
from lit_rlhf.config.registry import ALGORITHMS

MODULE_ARGUMENTS = ("model", "reward", "optimizer", "lr_scheduler", "rollout_engine", "kl_controller",
                    "score_transforms", "task_metrics", "environment")


def schema(settings: type, target: str, arguments: tuple[str, ...] = ()) -> type:
    """settings plus `_target_` and the constructor arguments that are not settings (any type)."""
    extra = [("_target_", str, field(default=target)), *[(name, Any, field(default=None)) for name in arguments]]
    return make_dataclass(f"{settings.__name__}Schema", extra, bases=(settings,))


def register_configs() -> None:
    """Every registered algorithm's schema (algo/<name>_schema), the model's and the data's; those already stored
    (an app that ran in this process, a notebook, a test) are kept."""
    store = ConfigStore.instance()
    stored = store.repo.get("algo", {})
    for entry in ALGORITHMS.values():
        if f"{entry.name}_schema.yaml" not in stored:
            store.store(group="algo", name=f"{entry.name}_schema",
                        node=schema(entry.settings, entry.target, MODULE_ARGUMENTS + entry.arguments))
    if "schema.yaml" not in store.repo.get("model", {}):
        store.store(group="model", name="schema", node=ModelConfig)
        store.store(group="data", name="schema", node=schema(DataConfig, "lit_rlhf.data.PromptDataModule"))
