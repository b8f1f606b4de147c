"""train_reward_model.py's task: a reward model fitted on preference pairs, saved as a folder that
`reward=reward_model reward.name_or_path=<folder>` loads as it is."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lit_rlhf.cli.train import instantiate_group, report, resume_path
from lit_rlhf.errors import ConfigError
from lit_rlhf.noise import silence_known_noise
from lit_rlhf.terminal import config_without_passwords


def train_reward_model(cfg: DictConfig) -> dict[str, float]:
    """Fits cfg.algo (a RewardModelModule) on cfg.data (a PreferenceDataModule); returns the final metrics."""
    silence_known_noise()
    epochs = cfg.get("epochs")
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
        raise ConfigError(f"epochs={epochs!r} must be a whole number >= 1.")
    L.seed_everything(cfg.seed, workers=True)
    datamodule = instantiate(cfg.data)
    module = instantiate(cfg.algo, _convert_="all")
    loggers = instantiate_group(cfg.get("logger"))
    trainer = instantiate(cfg.trainer, callbacks=instantiate_group(cfg.get("callbacks")), logger=loggers or False)
    for logger in loggers:
        logger.log_hyperparams(config_without_passwords(OmegaConf.to_container(cfg, resolve=True)))
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume_path(cfg), weights_only=True)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if trainer.is_global_zero:
        folder = module.save_reward_model(Path(cfg.save_dir))
        report(f"\nReward model: {folder}\n  use it: python train.py reward=reward_model "
               f"reward.name_or_path={folder} reward.dtype=float32 reward.normalize=true")
    report(f"Run directory: {cfg.paths.output_dir}")
    return metrics
