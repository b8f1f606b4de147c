"""evaluate.py ckpt_path=...: evaluate what was trained. The checkpoint's data, reward, gold reward, task metrics
and env are used unless the command line picks others; the checkpoint's algorithm and model settings always are,
but for algo.response_length and algo.temperature, which an evaluation may change. A checkpoint never chooses code
to run: a reward, gold reward, task metric or environment it names must be one of lit_rlhf's registered classes
(lit_rlhf/checkpoints/targets.py); any other must come from the command line. Nor does it choose where anything is
sent or which of the user's files and secrets are read: a reward server or judge endpoint it names (with the
environment variable whose value goes along as a token), or a local data file, is used only when the command line
names it, or confirms the checkpoint's with trust_checkpoint_io=true."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lit_rlhf.checkpoints.targets import only_registered_targets, public_names
from lit_rlhf.cli.overrides import command_line_keys
from lit_rlhf.config.command_line import override
from lit_rlhf.data.sources import BUNDLED, FILE_BUILDERS
from lit_rlhf.errors import ConfigError
from lit_rlhf.terminal import printable

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

    trusted = cfg.get("trust_checkpoint_io") is True

    def chosen(group: str) -> Any:
        if group in groups or group not in run_config:
            return cfg.get(group)
        config = only_registered_targets(run_config[group], group)
        if not trusted:
            refuse_endpoints(config, group)
        return config

    saved_data = checkpoint.get("datamodule_hyper_parameters")
    data = None
    data_keys = [key for key in keys if key.split(".", 1)[0] == "data"]
    # data.dataset naming the checkpoint's own dataset, and no other data setting: its run's held-out split
    confirmed = isinstance(saved_data, dict) and data_keys == ["data.dataset"] and \
        str(OmegaConf.select(cfg, "data.dataset")) == str(saved_data.get("dataset"))
    if isinstance(saved_data, dict) and (not data_keys or confirmed):
        if not (trusted or confirmed):
            refuse_local_files(saved_data.get("dataset"))
        # the held-out prompts of the run; remote code only from this command line
        data = {**saved_data, "trust_remote_code": bool(cfg.data.get("trust_remote_code", False))}
    return TrainedSettings(chosen("reward"), chosen("task_metrics"), chosen("env"), data, algo_overrides,
                           chosen("gold"))


CONFIRM = "trust_checkpoint_io=true if you trust whoever wrote the checkpoint"


def endpoints(config: Any) -> list[tuple[str, str | None]]:
    """The addresses a reward/gold/metric/env config sends texts to, each with the environment variable whose value
    goes along as a token: HTTPReward's url, an LLMJudge's base_url (a local judge sends nothing)."""
    from lit_rlhf.rewards import HTTPReward, LLMJudge

    remote = public_names((HTTPReward, LLMJudge))

    def found_in(node: Any) -> list[tuple[str, str | None]]:
        if isinstance(node, list):
            return [found for value in node for found in found_in(value)]
        if not isinstance(node, dict):
            return []
        cls = remote.get(str(node.get("_target_")))
        own = []
        if cls is HTTPReward:
            own = [(str(node.get("url")), node.get("auth_env"))]
        elif cls is LLMJudge and node.get("base_url") is not None:
            own = [(str(node["base_url"]), node.get("api_key_env"))]
        return own + [found for value in node.values() for found in found_in(value)]

    return found_in(config)


def refuse_endpoints(config: Any, group: str) -> None:
    """One line when a checkpoint's `group` settings would send texts (and a secret) to an address it chose."""
    for url, secret_env in endpoints(config):
        secret = f" with the value of ${secret_env} as its token" if secret_env else ""
        raise ConfigError(f"the checkpoint's {group} sends completions to {printable(url, one_line=True)[:200]!r}"
                          f"{printable(secret, one_line=True)[:120]}, and a checkpoint does not choose where anything "
                          f"is sent nor which secrets go along; pass {group}=... on the command line, or {CONFIRM}.")


def refuse_local_files(dataset: Any) -> None:
    """One line when a checkpoint's data.dataset names a local file: its rows would be read, shown and scored."""
    if dataset is None or str(dataset) in BUNDLED:
        return
    name = str(dataset)
    path = Path(name).expanduser()
    local = path.exists() or path.is_absolute() or name.startswith((".", "~")) or path.suffix.lower() in FILE_BUILDERS
    if local:
        shown = printable(name, one_line=True)[:200]
        raise ConfigError(f"the checkpoint's data.dataset={shown!r} is a local file, and a checkpoint does not choose "
                          f"which of your files are read; confirm it with {override('data.dataset', shown)} on the "
                          f"command line (or give another), or {CONFIRM}.")
