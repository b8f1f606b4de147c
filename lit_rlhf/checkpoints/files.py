"""Checkpoint files written atomically: a kill at any moment leaves the previous complete file or the new one.

Lightning's TorchCheckpointIO writes through fsspec's local transaction: a temporary file in $TMPDIR,
then a move, which is a truncate-and-copy when $TMPDIR is another filesystem (tmpfs /tmp, node-local
scratch): a kill during the copy leaves a truncated target. atomic_torch_save writes a partial file
beside the target, fsyncs it, renames it over the target (atomic on POSIX) and fsyncs the directory.
Reading is lit_rlhf.checkpoints.loading's.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import torch

from lit_rlhf.errors import writing

PARTIAL_MARK = ".partial-"
# Seconds a checkpoint download may wait to connect, and for each next block of bytes.
def non_finite_tensors(state_dict: dict[str, Any]) -> list[str]:
    return [k for k, v in state_dict.items()
            if isinstance(v, torch.Tensor) and v.is_floating_point() and not torch.isfinite(v).all()]


def tensors_digest(state_dict: dict[str, Any]) -> str:
    """A BLAKE2 digest of the tensors (names, dtypes, shapes, bytes): a flipped bit changes it."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(state_dict):
        tensor = state_dict[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_partial_files(target: Path) -> None:
    """Partial files a killed writer left beside target (this process's own are removed on failure)."""
    for partial in target.parent.glob(f".{target.name}{PARTIAL_MARK}*"):
        partial.unlink(missing_ok=True)


def atomic_torch_save(obj: Any, target: str | Path) -> None:
    target = Path(target)
    with writing(target.parent):
        target.parent.mkdir(parents=True, exist_ok=True)
    remove_partial_files(target)
    partial = target.with_name(f".{target.name}{PARTIAL_MARK}{os.getpid()}")
    try:
        with writing(target), open(partial, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, target)
        fsync_directory(target.parent)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
