"""evaluate.py's checks of its command line, run before it imports torch and loads anything."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from lit_rlhf.cli.checks import check_model_locations, check_reward_group, check_seed
from lit_rlhf.cli.hardware_checks import cuda_available
from lit_rlhf.cli.own_components import evaluation_judge, your_own_class, your_own_reward
from lit_rlhf.cli.run_dirs import latest_training_checkpoint
from lit_rlhf.config.command_line import override
from lit_rlhf.config.validation import check_bootstraps, check_not_empty
from lit_rlhf.errors import ConfigError


def check_evaluation_device(device: str) -> None:
    """evaluate.py's device=cuda (or cuda:N) on a machine without CUDA: refused before the model loads."""
    if device.partition(":")[0] == "cuda" and not cuda_available():
        raise ConfigError(f"device={device!r}, but this machine has no CUDA device; use device=auto or device=cpu.")


def check_evaluation(cfg: DictConfig) -> None:
    """evaluate.py's checks of the command line, before it loads anything: the reward group and its own keys (what it
    compares, a checkpoint or an exported policy; its samples; the bootstrap)."""
    if "teacher" in (cfg.get("algo") or {}):  # algo=distill: its teacher is needed to train only, never loaded here
        raise ConfigError("algo=distill is for training (evaluate.py never loads its teacher); remove it: evaluate a "
                          "distillation run with ckpt_path=<its checkpoint> (its settings are the run's), or its "
                          "export with policy_path=<folder> (the sampling settings: algo.response_length, "
                          "algo.temperature).")
    check_evaluation_device(str(cfg.get("device", "auto")))
    check_seed(cfg)
    check_reward_group(cfg)
    your_own_reward(cfg, "gold")
    your_own_class(cfg, "rollout")
    your_own_class(cfg, "judge", evaluation_judge())
    for key in ("ckpt_path", "policy_path"):  # empty: a shell variable that is not set, not the untrained model
        check_not_empty(key, cfg.get(key), f"give a path, or leave {key} out to compare the untrained model with "
                                           f"itself")
    if cfg.get("ckpt_path") and cfg.get("policy_path"):
        raise ConfigError("give ckpt_path or policy_path, not both.")
    if str(cfg.get("ckpt_path")) == "last":  # train.py's word for its run directory's checkpoint
        latest = latest_training_checkpoint(Path(cfg.paths.log_dir))
        which = (f"the latest training run's is {override('ckpt_path', latest)}" if latest is not None
                 else "e.g. ckpt_path=<run dir>/checkpoints/last.ckpt")
        raise ConfigError(f"ckpt_path=last: evaluate.py takes the path of a checkpoint; {which}")
    for key, minimum in (("samples_per_prompt", 1), ("num_bootstraps", 1)):
        value = cfg.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ConfigError(f"{key}={value!r} must be a whole number >= {minimum}.")
    for key in ("trust_remote_code", "trust_checkpoint_io"):
        if not isinstance(cfg.get(key), bool):
            raise ConfigError(f"{key}={cfg.get(key)!r} must be true or false.")
    confidence = cfg.get("confidence")
    if not isinstance(confidence, (int, float)) or isinstance(confidence, bool) or not 0 < confidence < 1:
        raise ConfigError(f"confidence={confidence!r} must be a number between 0 and 1 (e.g. 0.95).")
    check_bootstraps("num_bootstraps", cfg.get("num_bootstraps"), confidence)
    check_model_locations(cfg)
