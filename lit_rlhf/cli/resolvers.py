"""OmegaConf resolvers used by conf/: ${asset:tiny-pythia}, ${optimizer_steps:...}, ${new_run_dir:...}."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

from lit_rlhf.assets import asset_path
from lit_rlhf.cli.run_dirs import new_run_dir


def optimizer_steps(rl_steps: int, num_ppo_epochs: int, num_mini_batches: int) -> int:
    """Lightning counts optimizer steps in manual optimization: one per minibatch of every PPO epoch."""
    return int(rl_steps) * int(num_ppo_epochs) * int(num_mini_batches)


def wandb_offline() -> bool:
    """W&B logs online only where the user configured it: WANDB_MODE=online, an API key, or `wandb login`."""
    if os.environ.get("WANDB_MODE") in ("online", "offline", "disabled"):
        return os.environ["WANDB_MODE"] != "online"
    netrc = Path.home() / ".netrc"
    logged_in = netrc.exists() and "api.wandb.ai" in netrc.read_text(errors="ignore")
    return not (os.environ.get("WANDB_API_KEY") or logged_in)


def register_resolvers() -> None:
    resolvers = {"asset": asset_path, "optimizer_steps": optimizer_steps, "wandb_offline": wandb_offline}
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    if not OmegaConf.has_resolver("new_run_dir"):  # cached: every read of hydra.run.dir gives the same directory
        OmegaConf.register_new_resolver("new_run_dir", new_run_dir, use_cache=True)
