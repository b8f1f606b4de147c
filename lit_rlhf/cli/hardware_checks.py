"""Checks of the hardware a run asks for (accelerator, devices, FSDP2's settings), before the Trainer is built."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from lit_rlhf.errors import ConfigError


def check_accelerator(cfg: DictConfig) -> None:
    accelerator = str(cfg.get("trainer", {}).get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda") and not cuda_available():
        raise ConfigError(f"trainer.accelerator={accelerator} (trainer=gpu) needs a CUDA GPU, and this machine has "
                          f"none; use trainer=cpu, or trainer=default, which picks what is there.")
    devices = cfg.get("trainer", {}).get("devices")  # [0,1] or '0,1': GPU indices, which Lightning refused on a CPU
    indices = not isinstance(devices, (int, str)) or (isinstance(devices, str) and "," in devices)
    if devices is not None and indices and (accelerator == "cpu" or (accelerator == "auto" and not cuda_available())):
        shown = OmegaConf.to_container(devices) if OmegaConf.is_config(devices) else devices
        why = "trainer.accelerator=cpu" if accelerator == "cpu" else "this machine has no CUDA GPU"
        raise ConfigError(f"trainer.devices={shown} picks GPUs by index, and this run is on the CPU ({why}); give "
                          f"a number of processes instead, e.g. trainer.devices=2.")


def cuda_available() -> bool:
    import torch  # only asked for trainer=gpu or device=cuda: the other checks run before torch is imported

    return torch.cuda.is_available()


FSDP2_TARGET = "lit_rlhf.distributed.strategy.FSDP2Strategy"
FSDP2_SETTINGS = ("sharded_loading", "sharded_sampling", "cpu_offload", "host_mmap_threshold_mib")


def fsdp2_only(name: str, value) -> str:
    return (f"trainer.strategy.{name}={value} is a setting of trainer=fsdp2 (FSDP2's sharding); add trainer=fsdp2 to "
            f"use it.")


def fsdp2_setting_without_fsdp2(key: str, overrides: list[str]) -> str | None:
    """The one line for an FSDP2 setting typed without trainer=fsdp2 (its strategy has no such key), or None."""
    for override in overrides:
        path, _, value = override.lstrip("+~").partition("=")
        parent, _, name = path.rpartition(".")
        if parent == "trainer.strategy" and name in FSDP2_SETTINGS and path.startswith(key):
            return fsdp2_only(name, value)
    return None


def check_fsdp2_settings(cfg: DictConfig) -> None:
    from lit_rlhf.config.model import DORA_UNDER_SHARDED_LOADING
    from lit_rlhf.config.validation import SYNC_REF_MODEL_UNDER_FSDP2

    strategy = cfg.get("trainer", {}).get("strategy")
    if not isinstance(strategy, DictConfig):
        return
    if strategy.get("_target_") != FSDP2_TARGET:
        for name in FSDP2_SETTINGS:
            if name in strategy:
                raise ConfigError(fsdp2_only(name, strategy[name]))
    elif strategy.get("sharded_loading", True) and OmegaConf.select(cfg, "model.lora.use_dora", default=False):
        raise ConfigError(DORA_UNDER_SHARDED_LOADING)
    elif OmegaConf.select(cfg, "algo.sync_ref_model", default=False) is True:  # as ReferenceSync.check, before loading
        raise ConfigError(SYNC_REF_MODEL_UNDER_FSDP2)
