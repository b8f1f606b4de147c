"""Checkpoint files: written atomically, read weights-only, refused in one line when unusable.

Lightning's TorchCheckpointIO writes through fsspec's local transaction: a temporary file in $TMPDIR,
then a move, which is a truncate-and-copy when $TMPDIR is another filesystem (tmpfs /tmp, node-local
scratch): a kill during the copy leaves a truncated target. SafeCheckpointIO writes a partial file
beside the target, fsyncs it, renames it over the target (atomic on POSIX) and fsyncs the directory,
so the target is always the previous complete checkpoint or the new complete one. An http(s) checkpoint
is downloaded afresh with a bounded wait (LIT_RLHF_DOWNLOAD_TIMEOUT_S), never served from a cache keyed by
its file name. It refuses to write
weights that are not finite, and loads with torch.load(weights_only=True) for files and URLs alike:
a checkpoint can hold tensors and plain values, never code.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import io
import os
import pickle
import re
import urllib.error
import urllib.request
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.cloud_io import _load as lightning_load
from lightning.fabric.utilities.cloud_io import get_filesystem

from lit_rlhf.errors import ConfigError

PARTIAL_MARK = ".partial-"
# Seconds a checkpoint download may wait to connect, and for each next block of bytes.
DOWNLOAD_TIMEOUT_VARIABLE = "LIT_RLHF_DOWNLOAD_TIMEOUT_S"
DEFAULT_DOWNLOAD_TIMEOUT_S = 60.0


def is_remote(path: str | Path) -> bool:
    return "://" in str(path)


def download_timeout_s() -> float:
    value = os.environ.get(DOWNLOAD_TIMEOUT_VARIABLE, str(DEFAULT_DOWNLOAD_TIMEOUT_S))
    try:
        return float(value)
    except ValueError:
        raise ConfigError(f"{DOWNLOAD_TIMEOUT_VARIABLE}={value!r} is not a number of seconds; set it to e.g. "
                          f"60.") from None


def download(url: str, timeout_s: float) -> bytes:
    """The body at an http(s) URL, read afresh every time (no cache keyed by file name): at most timeout_s
    to connect, and to wait for each next block of bytes."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.read()
    except TimeoutError as err:
        raise ConfigError(f"ckpt_path={url!r}: the server sent nothing for {timeout_s:g} s; check the URL, or "
                          f"raise {DOWNLOAD_TIMEOUT_VARIABLE}.") from err
    except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
        reason = getattr(err, "reason", None) or err
        raise ConfigError(f"ckpt_path={url!r} cannot be downloaded ({reason}); check the URL, or download the "
                          f"file and give its path.") from err


def load_checkpoint_file(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """torch.load(weights_only=True) of a local path or URL, with one-line errors for unusable files."""
    name = str(path)
    if not is_remote(name) and Path(name).is_dir():  # a sharded checkpoint of trainer=fsdp2, read whole
        from lit_rlhf.distributed.checkpoint import read_sharded_checkpoint

        return read_sharded_checkpoint(name)
    if not is_remote(name) and not Path(name).is_file():
        raise ConfigError(f"ckpt_path={name!r} is not a file; give a .ckpt written by lit_rlhf "
                          f"(e.g. <run dir>/checkpoints/last.ckpt).")
    source: Any = name
    if name.startswith(("http://", "https://")):  # torch.hub would cache it by its file name alone
        source = io.BytesIO(download(name, download_timeout_s()))
    try:
        if isinstance(source, io.BytesIO):
            checkpoint = torch.load(source, map_location=map_location, weights_only=True)
        else:
            checkpoint = lightning_load(name, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"GLOBAL (\S+)", str(err))  # the callable or class the pickle asks for
        if found is None:  # not a pickle a checkpoint writer makes: random bytes, another format
            raise ConfigError(f"ckpt_path={name!r} cannot be read (not a PyTorch checkpoint); give a .ckpt written "
                              f"by lit_rlhf.") from err
        what = f"it references {found.group(1)}"
        raise ConfigError(f"ckpt_path={name!r} was refused: {what}, and checkpoints are loaded weights-only "
                          f"(tensors and plain values, never code); give a checkpoint written by lit_rlhf.") from err
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as err:
        raise ConfigError(f"ckpt_path={name!r} cannot be read ({type(err).__name__}: truncated, empty or not a "
                          f"PyTorch checkpoint); resume from another checkpoint of the run.") from err
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(f"ckpt_path={name!r} is not a Lightning checkpoint (no state_dict); give one written "
                          f"by lit_rlhf.")
    malformed = [key for key, kind in (("state_dict", dict), ("hyper_parameters", dict), ("rlhf_state", dict),
                                       ("optimizer_states", list)) if key in checkpoint
                 and not isinstance(checkpoint[key], kind)]
    if malformed or not all(isinstance(v, torch.Tensor) for v in checkpoint["state_dict"].values()):
        what = malformed[0] if malformed else "state_dict (values that are not tensors)"
        raise ConfigError(f"ckpt_path={name!r} has a malformed {what}; give a checkpoint written by lit_rlhf.")
    return checkpoint


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


class SafeCheckpointIO(TorchCheckpointIO):
    """TorchCheckpointIO with atomic local writes, a finite-weights check and weights-only loads."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        bad = non_finite_tensors(checkpoint.get("state_dict", {}))
        if bad:
            raise ConfigError(f"refusing to write {path}: {len(bad)} trained tensors hold NaN or inf (e.g. {bad[0]}); "
                              f"the previous checkpoint is kept.")
        if is_remote(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        atomic_torch_save(checkpoint, path)

    def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        if not is_remote(path) and Path(path).is_dir():
            raise ConfigError(f"ckpt_path={str(path)!r} is a sharded checkpoint (trainer=fsdp2): resume it with "
                              f"trainer=fsdp2 on the same number of ranks, or export it (python -m lit_rlhf.export) "
                              f"and start from the exported model.")
        return load_checkpoint_file(path, map_location=map_location or "cpu")

    def remove_checkpoint(self, path) -> None:
        fs = get_filesystem(path)
        if fs.exists(path):
            fs.rm(path, recursive=True)
