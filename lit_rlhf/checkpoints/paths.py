"""Where a checkpoint is: a URL, a local file, or the directory of a sharded checkpoint of trainer=fsdp2 (its
META_FILE beside the shards). Torch-free, so that the apps refuse a ckpt_path that names no checkpoint before they
import torch and load the model."""

from __future__ import annotations

from pathlib import Path

from lit_rlhf.config.command_line import override
from lit_rlhf.config.validation import check_not_empty
from lit_rlhf.errors import ConfigError

META_FILE = "meta.pt"  # Lightning's name for a sharded checkpoint's metadata
# where a run directory, or its checkpoints folder, keeps the checkpoint to resume from
CHECKPOINTS_INSIDE = ("checkpoints/last.ckpt", "last.ckpt")


def is_remote(path: str | Path) -> bool:
    return "://" in str(path)


def check_checkpoint_path(name: str) -> None:
    """A local ckpt_path that names no checkpoint (nothing there, or a directory that is not a sharded checkpoint,
    such as the run directory): one line, with the checkpoint inside it when there is one."""
    check_not_empty("ckpt_path", name, "give a .ckpt written by lit_rlhf (e.g. <run dir>/checkpoints/last.ckpt), or "
                                       "leave ckpt_path out to start anew")
    path = Path(name)
    if is_remote(name) or path.is_file() or (path / META_FILE).is_file():
        return
    if not path.is_dir():
        raise ConfigError(f"ckpt_path={name!r} is not a file; give a .ckpt written by lit_rlhf "
                          f"(e.g. <run dir>/checkpoints/last.ckpt).")
    inside = next((f"{name.rstrip('/')}/{file}" for file in CHECKPOINTS_INSIDE if (path / file).exists()), None)
    if inside is not None:
        raise ConfigError(f"ckpt_path={name!r} is a directory that holds checkpoints, not one; give one of them, "
                          f"e.g. {override('ckpt_path', inside)}")
    raise ConfigError(f"ckpt_path={name!r} is a directory without {META_FILE}, not a checkpoint; give a .ckpt "
                      f"written by lit_rlhf (a file, or the directory of a sharded one of trainer=fsdp2).")
