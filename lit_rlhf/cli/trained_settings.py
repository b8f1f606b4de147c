"""evaluate.py ckpt_path=...: evaluate what was trained. The checkpoint's data, reward, gold reward, task metrics
and env are used unless the command line picks others; the checkpoint's algorithm and model settings always are,
but for algo.response_length and algo.temperature, which an evaluation may change. A checkpoint never chooses code
to run: a reward, gold reward, task metric or environment it names must be one of lit_rlhf's registered classes
(lit_rlhf/checkpoint_targets.py); any other must come from the command line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from lit_rlhf.checkpoint_targets import only_registered_targets
from lit_rlhf.errors import ConfigError

EVALUATION_ALGO_SETTINGS = ("response_length", "temperature")  # the ones evaluate.py ckpt_path=... honours
FROM_CHECKPOINT = ("algo", "model")  # groups a checkpoint fixes


@dataclass
class TrainedSettings:
    reward: Any  # a config to instantiate
    task_metrics: Any
    env: Any  # the environment of multi-turn episodes (a config), or None
    data: dict[str, Any] | None  # PromptDataModule settings, or None: the command line's cfg.data
    algo_overrides: dict[str, Any]
    gold: Any = None  # the gold reward (a config; empty or None: none)


def command_line_keys() -> list[str]:
    """The keys the user's overrides set (`reward`, `reward.weights.vader`, `algo.temperature`, ...)."""
    if not HydraConfig.initialized():
        return []
    return [o.lstrip("+~").split("=", 1)[0] for o in HydraConfig.get().overrides.task]


def trained_settings(cfg: DictConfig, checkpoint: dict[str, Any]) -> TrainedSettings:
    """What to evaluate a checkpoint with (see module doc); one line for an override that cannot apply."""
    keys = command_line_keys()
    groups = {key.split(".", 1)[0] for key in keys}
    algo_overrides = {}
    for key in keys:
        group, _, setting = key.partition(".")
        if group not in FROM_CHECKPOINT:
            continue
        if group == "algo" and setting in EVALUATION_ALGO_SETTINGS:
            algo_overrides[setting] = OmegaConf.select(cfg, key)
            continue
        raise ConfigError(f"{key} does not apply to evaluate.py ckpt_path=...: the checkpoint's {group} settings are "
                          f"evaluated (of them, only algo.response_length and algo.temperature may change); drop it.")
    run_config = checkpoint.get("rlhf_state", {}).get("run_config") or {}

    def chosen(group: str) -> Any:
        if group in groups or group not in run_config:
            return cfg.get(group)
        return only_registered_targets(run_config[group], group)

    saved_data = checkpoint.get("datamodule_hyper_parameters")
    data = None
    if "data" not in groups and isinstance(saved_data, dict):
        # the held-out prompts of the run; remote code only from this command line
        data = {**saved_data, "trust_remote_code": bool(cfg.data.get("trust_remote_code", False))}
    return TrainedSettings(chosen("reward"), chosen("task_metrics"), chosen("env"), data, algo_overrides,
                           chosen("gold"))
