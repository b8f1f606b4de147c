"""Checkpoint files written atomically: a kill at any moment leaves the previous complete file or the new one.

Lightning's TorchCheckpointIO writes through fsspec's local transaction: a temporary file in $TMPDIR,
then a move, which is a truncate-and-copy when $TMPDIR is another filesystem (tmpfs /tmp, node-local
scratch): a kill during the copy leaves a truncated target. atomic_torch_save writes a partial file
beside the target, fsyncs it, renames it over the target (atomic on POSIX) and fsyncs the directory.
Reading is lit_rlhf.checkpoints.loading's.
"""

from __future__ import annotations

import errno
import hashlib
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

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


# How libraries that write files (torch, safetensors) report an OS error in an exception type of their own.
OS_ERROR_TEXTS = {"No space left on device": errno.ENOSPC, "Read-only file system": errno.EROFS,
                  "Permission denied": errno.EACCES, "Disk quota exceeded": errno.EDQUOT}


@contextmanager
def writing(path: str | Path):
    """Errors of writing into `path` as OSErrors that name it: a full disk, a read-only or forbidden target."""
    try:
        yield
    except OSError as err:
        if err.filename is None and err.errno is not None:
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise
    except Exception as err:
        code = next((code for text, code in OS_ERROR_TEXTS.items() if text in str(err)), None)
        if code is None and disk_full(path):  # torch reports a short write on a full disk as a position mismatch
            code = errno.ENOSPC
        if code is None:
            raise
        raise OSError(code, os.strerror(code), str(path)) from err


def disk_full(path: str | Path, below_bytes: int = 2**20) -> bool:
    """Whether the filesystem holding path (or its nearest existing parent) has less than below_bytes free."""
    existing = next((p for p in (Path(path), *Path(path).absolute().parents) if p.exists()), None)
    if existing is None:
        return False
    stats = os.statvfs(existing)
    return stats.f_bavail * stats.f_frsize < below_bytes


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
