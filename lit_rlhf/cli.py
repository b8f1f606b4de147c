"""The Hydra application behind train.py: instantiate everything from the config and fit."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from lit_rlhf.errors import ConfigError, UnavailableError

T = TypeVar("T")


def instantiate_group(group: DictConfig | None) -> list[Any]:
    """Callbacks or loggers: a dict of {name: config with _target_}; a null entry switches one off."""
    return [instantiate(conf) for conf in (group or {}).values() if conf is not None and "_target_" in conf]


@rank_zero_only
def report(line: str) -> None:
    print(line, flush=True)


def train(cfg: DictConfig) -> dict[str, float]:
    """Fits cfg.algo on cfg.data; returns the final metrics."""
    L.seed_everything(cfg.seed, workers=True)
    datamodule = instantiate(cfg.data)
    module = instantiate(cfg.algo, _convert_="all")
    loggers = instantiate_group(cfg.get("logger"))
    trainer = instantiate(cfg.trainer, callbacks=instantiate_group(cfg.get("callbacks")), logger=loggers or False)
    for logger in loggers:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    output_dir = Path(cfg.paths.output_dir)
    if cfg.get("export_dir") and trainer.is_global_zero:
        from lit_rlhf.export import export_policy

        report(f"Exported the trained policy to {export_policy(module, cfg.export_dir)}")
    report(f"\nRun directory: {output_dir}")
    for logger in loggers:
        report(f"  {type(logger).__name__}: {getattr(logger, 'log_dir', None) or logger.save_dir}")
    if trainer.checkpoint_callback is not None and trainer.checkpoint_callback.dirpath:
        report(f"  checkpoints: {trainer.checkpoint_callback.dirpath}")
    return {k: float(v) for k, v in trainer.callback_metrics.items()}


def user_error(err: BaseException) -> str | None:
    """The one-line message for a mistake the user can fix, looking through Hydra's instantiate wrapper."""
    while err is not None:
        if isinstance(err, (ConfigError, UnavailableError)):
            return str(err)
        if isinstance(err, MissingMandatoryValue):
            return (f"{err.full_key or err} is required (marked ??? in conf/); set it on the command line, "
                    f"e.g. model.name_or_path=NAME_OR_PATH for model=causal_lm.")
        err = err.__cause__
    return None


def report_user_errors(fn: Callable[[DictConfig], T], cfg: DictConfig) -> T:
    """fn(cfg) with user mistakes reported as one line (exit code 2) instead of a stack trace."""
    try:
        return fn(cfg)
    except SIGTERMException:
        print("stopped by SIGTERM after a complete RL step; see the checkpoint above to resume.", file=sys.stderr)
        sys.exit(143)
    except Exception as err:
        message = user_error(err)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def run(cfg: DictConfig) -> dict[str, float]:
    """train() with user mistakes reported as one line (exit code 2) instead of a stack trace."""
    return report_user_errors(train, cfg)
