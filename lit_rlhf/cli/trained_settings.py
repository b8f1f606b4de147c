"""evaluate.py ckpt_path=...: evaluate what was trained. The checkpoint's data, reward, task metrics and env are
used unless the command line picks others; the checkpoint's algorithm and model settings always are, but for
algo.response_length and algo.temperature, which an evaluation may change. A checkpoint never chooses code
to run: a reward or task metric it names outside lit_rlhf must come from the command line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

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


def command_line_keys() -> list[str]:
    """The keys the user's overrides set (`reward`, `reward.weights.vader`, `algo.temperature`, ...)."""
    if not HydraConfig.initialized():
        return []
    return [o.lstrip("+~").split("=", 1)[0] for o in HydraConfig.get().overrides.task]


def code_targets(config: Any) -> list[str]:
    """Every `_target_` in a config tree."""
    if isinstance(config, dict):
        own = [str(config["_target_"])] if "_target_" in config else []
        return own + [t for value in config.values() for t in code_targets(value)]
    if isinstance(config, list):
        return [t for value in config for t in code_targets(value)]
    return []


def without_outside_code(config: Any, group: str) -> Any:
    outside = [t for t in code_targets(config) if not t.startswith("lit_rlhf.")]
    if outside:
        raise ConfigError(f"the checkpoint's {group} calls {outside[0]!r}, outside lit_rlhf, and a checkpoint never "
                          f"chooses code to run; pass {group}=... (or {group}._target_=...) on the command line.")
    return config


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
        return without_outside_code(run_config[group], group)

    saved_data = checkpoint.get("datamodule_hyper_parameters")
    data = None
    if "data" not in groups and isinstance(saved_data, dict):
        # the held-out prompts of the run; remote code only from this command line
        data = {**saved_data, "trust_remote_code": bool(cfg.data.get("trust_remote_code", False))}
    return TrainedSettings(chosen("reward"), chosen("task_metrics"), chosen("env"), data, algo_overrides)
