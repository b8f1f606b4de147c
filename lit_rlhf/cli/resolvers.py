"""OmegaConf resolvers used by conf/: ${asset:tiny-pythia}, ${new_run_dir:...}, ${app_groups:...}."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

from lit_rlhf.assets import asset_path
from lit_rlhf.cli.app_help import app_groups
from lit_rlhf.cli.configs import register_configs
from lit_rlhf.cli.run_dirs import new_run_dir


def wandb_offline() -> bool:
    """W&B logs online only where the user configured it: WANDB_MODE=online, an API key, or `wandb login`."""
    if os.environ.get("WANDB_MODE") in ("online", "offline", "disabled"):
        return os.environ["WANDB_MODE"] != "online"
    netrc = Path.home() / ".netrc"
    logged_in = netrc.exists() and "api.wandb.ai" in netrc.read_text(errors="ignore")
    return not (os.environ.get("WANDB_API_KEY") or logged_in)


def register_resolvers() -> None:
    """The resolvers conf/ uses, and the typed settings (lit_rlhf.cli.configs) it composes on."""
    register_configs()
    resolvers = {"asset": asset_path, "wandb_offline": wandb_offline, "app_groups": app_groups}
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    if not OmegaConf.has_resolver("new_run_dir"):  # cached: every read of hydra.run.dir gives the same directory
        OmegaConf.register_new_resolver("new_run_dir", new_run_dir, use_cache=True)
