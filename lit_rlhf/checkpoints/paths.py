"""Where a checkpoint is: a URL, or a local file (a sharded checkpoint of trainer=fsdp2: a directory). Torch-free,
so that the apps refuse a ckpt_path that names nothing before they import torch and load the model."""

from __future__ import annotations

from pathlib import Path

from lit_rlhf.errors import ConfigError


def is_remote(path: str | Path) -> bool:
    return "://" in str(path)


def check_checkpoint_exists(name: str) -> None:
    """A local ckpt_path that is neither a file nor a sharded checkpoint's directory: one line."""
    if not is_remote(name) and not Path(name).is_dir() and not Path(name).is_file():
        raise ConfigError(f"ckpt_path={name!r} is not a file; give a .ckpt written by lit_rlhf "
                          f"(e.g. <run dir>/checkpoints/last.ckpt).")
