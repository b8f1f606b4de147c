"""Checkpoints read weights-only, refused in one line when unusable; Lightning's checkpoint_io made safe.

A checkpoint file is loaded with torch.load(weights_only=True), from a path or a URL alike: it can hold tensors and
plain values, never code. An http(s) checkpoint is downloaded afresh with a bounded wait
(LIT_RLHF_DOWNLOAD_TIMEOUT_S), never served from a cache keyed by its file name. A directory is a sharded checkpoint
of trainer=fsdp2 (lit_rlhf.checkpoints.sharded), read whole. SafeCheckpointIO writes atomically
(lit_rlhf.checkpoints.files) and refuses to write weights that are not finite.
"""

from __future__ import annotations

import http.client
import io
import os
import pickle
import re
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.cloud_io import get_filesystem

from lit_rlhf.checkpoints.files import atomic_torch_save, non_finite_tensors
from lit_rlhf.checkpoints.paths import check_checkpoint_path, is_remote
from lit_rlhf.checkpoints.sharded import read_sharded_checkpoint
from lit_rlhf.errors import ConfigError

DOWNLOAD_TIMEOUT_VARIABLE = "LIT_RLHF_DOWNLOAD_TIMEOUT_S"
DEFAULT_DOWNLOAD_TIMEOUT_S = 60.0


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
    check_checkpoint_path(name)
    if not is_remote(name) and Path(name).is_dir():  # a sharded checkpoint of trainer=fsdp2, read whole
        return read_sharded_checkpoint(name)
    source: Any = name
    if name.startswith(("http://", "https://")):  # torch.hub would cache it by its file name alone
        source = io.BytesIO(download(name, download_timeout_s()))
    try:
        if isinstance(source, io.BytesIO):
            checkpoint = torch.load(source, map_location=map_location, weights_only=True)
        else:
            with get_filesystem(name).open(name, "rb") as file:  # a local path, or fsspec's (s3://, gs://, ...)
                checkpoint = torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        # the callable or class the pickle asks for, module.name: a text file starting with "c" (pickle's GLOBAL)
        # asks for its first line
        found = re.search(r"GLOBAL ([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\s|$)", str(err))
        if found is None:  # not a pickle a checkpoint writer makes: random bytes, text, another format
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
        check_checkpoint_path(str(path))
        if not is_remote(path) and Path(path).is_dir():
            raise ConfigError(f"ckpt_path={str(path)!r} is a sharded checkpoint (trainer=fsdp2): resume it with "
                              f"trainer=fsdp2 on the same number of ranks, or export it (python -m lit_rlhf.export) "
                              f"and start from the exported model.")
        return load_checkpoint_file(path, map_location=map_location or "cpu")

    def remove_checkpoint(self, path) -> None:
        fs = get_filesystem(path)
        if fs.exists(path):
            fs.rm(path, recursive=True)


def use_safe_checkpoint_io(trainer) -> None:
    """Lightning's default checkpoint writer replaced by SafeCheckpointIO in a module's setup (a custom
    checkpoint_io, or a sharded strategy's own, is kept): without it last.ckpt was written through a temporary file
    moved over it, which a full disk or a kill during the move left truncated."""
    strategy = getattr(trainer, "strategy", None)
    if strategy is not None and type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = SafeCheckpointIO()


def require_rl_checkpoint(checkpoint: dict, ckpt_path) -> None:
    """One line unless `checkpoint` was written by train.py; a preference run's is named as such."""
    if isinstance(checkpoint.get("rlhf_state"), dict) and "algo" in checkpoint["rlhf_state"]:
        return
    written_by = (checkpoint.get("pairs_identity") or {}).get("module")
    if written_by in ("DPOModule", "RewardModelModule", "SFTModule"):
        kind = "an SFT run" if written_by == "SFTModule" else "a preference run"
        use = ("the reward model it trained is <run dir>/reward_model: train against it with reward=reward_model "
               "reward.name_or_path=<run dir>/reward_model" if written_by == "RewardModelModule" else
               "the policy it trained is <run dir>/policy: evaluate it with evaluate.py policy_path=<run dir>/policy, "
               "or train on from it with train.py model.name_or_path=<run dir>/policy")
        raise ConfigError(f"{ckpt_path} is a checkpoint of {written_by} ({kind}), not of train.py; {use}.")
    raise ConfigError(f"{ckpt_path} is not a lit_rlhf checkpoint (no rlhf_state); give one written by train.py.")
