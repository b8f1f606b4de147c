"""OmegaConf resolvers used by conf/: ${asset:tiny-pythia}, ${new_run_dir:...}, ${app_groups:...}, and those of
conf/logger/wandb.yaml."""

from __future__ import annotations

import os
import re
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


def wandb_run_to_resume(run_dir: str, offline: bool) -> str | None:
    """The id of the online W&B run that a resume in this run directory continues (its wandb/latest-run names
    run-<time>-<id>), so that the curves go on in that W&B run rather than in a new one; None in a new run directory,
    and where this run or the earlier one is offline: wandb does not resume offline runs, and offline runs that share
    an id replace one another when `wandb sync` uploads them."""
    latest = Path(run_dir) / "wandb" / "latest-run"
    if offline or not latest.exists():
        return None
    found = re.fullmatch(r"run-\d{8}_\d{6}-([\w-]+)", latest.resolve().name)
    return found.group(1) if found else None


def register_resolvers() -> None:
    """The resolvers conf/ uses, and the typed settings (lit_rlhf.cli.configs) it composes on."""
    register_configs()
    resolvers = {"asset": asset_path, "wandb_offline": wandb_offline, "app_groups": app_groups,
                 "wandb_run_to_resume": wandb_run_to_resume}
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    if not OmegaConf.has_resolver("new_run_dir"):  # cached: every read of hydra.run.dir gives the same directory
        OmegaConf.register_new_resolver("new_run_dir", new_run_dir, use_cache=True)
