"""Sharded checkpoints of trainer=fsdp2: a directory written with torch's distributed checkpoint (DCP).

    step100.ckpt/            every rank writes its shards of the trained tensors and their optimizer state
      .metadata, __0_0.distcp, __1_0.distcp, ...
      meta.pt                everything else (settings, RL counters, random states, loops, param groups)

Like the single-file checkpoints: only the trained tensors are saved (frozen weights reload from the model
path), a checkpoint is written beside its target and renamed into place once every rank has written (a kill
at any moment leaves the previous complete checkpoint or the new one), and nothing in it can run code:
DCP's metadata file is a pickle, read here with an unpickler that knows DCP's own metadata classes and
nothing else, the tensors are read as tensors only, and meta.pt loads weights-only.

A directory reads into a plain checkpoint (full tensors, one process) with `read_sharded_checkpoint`, which is
what export and evaluate do.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import math
import os
import pathlib
import pickle
import re
import shutil
import uuid
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta, TensorStorageMetadata

from lit_rlhf.checkpoints.files import PARTIAL_MARK, atomic_torch_save, fsync_directory
from lit_rlhf.checkpoints.paths import META_FILE
from lit_rlhf.errors import ConfigError
from lit_rlhf.terminal import clipped_first_line

OLD_MARK = ".replaced-"  # a checkpoint being replaced (PARTIAL_MARK: one being written)
TORCH_VALUE_TYPES = (torch.dtype, torch.layout, torch.memory_format)


class MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP's metadata: its own dataclasses and enums (classes only: a function of DCP's, such as one that
    converts a torch.save file, would run with the pickle's arguments), torch sizes, dtypes and layouts, paths,
    plain containers."""

    METADATA_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")
    ALLOWED = {("builtins", "set"), ("builtins", "frozenset"), ("builtins", "object"), ("collections", "OrderedDict"),
               ("copyreg", "_reconstructor"), ("torch", "Size"), ("torch.serialization", "_get_layout")}
    # the checkpoint's path; Python 3.13 pickles it from pathlib._local, earlier ones from pathlib: either reads back
    # on any Python
    PATH_MODULES, PATH_CLASSES = ("pathlib", "pathlib._local"), ("PosixPath", "WindowsPath")

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        if module in self.PATH_MODULES and name in self.PATH_CLASSES:
            return getattr(pathlib, name)
        if module in self.METADATA_MODULES:
            found = super().find_class(module, name)
            if isinstance(found, type) and (dataclasses.is_dataclass(found) or issubclass(found, enum.Enum)):
                return found
        if module == "torch" and isinstance(getattr(torch, name, None), TORCH_VALUE_TYPES):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"refused global {module}.{name} in a checkpoint's .metadata")


class SafeReader(FileSystemReader):
    """FileSystemReader whose metadata unpickling refuses anything but DCP's metadata."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as file:
            metadata = load_dcp_metadata(file)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def load_dcp_metadata(file) -> Metadata:
    """DCP's Metadata from a .metadata file through MetadataUnpickler; pickle.UnpicklingError for anything else
    (a refused global, a dict or another object, a constructor called with bad arguments, a truncated file)."""
    try:
        metadata = MetadataUnpickler(file).load()
    except pickle.UnpicklingError:
        raise
    except Exception as err:  # what a crafted pickle can make allowed constructors raise
        raise pickle.UnpicklingError(f"refused a malformed .metadata ({type(err).__name__})") from None
    if not isinstance(metadata, Metadata) or not isinstance(getattr(metadata, "state_dict_metadata", None), dict):
        raise pickle.UnpicklingError("refused a .metadata that holds no DCP metadata")
    return metadata


class TensorsOnlyPlanner(DefaultLoadPlanner):
    """Loads tensors; an object item (which DCP would torch.load unrestricted) is refused."""

    def load_bytes(self, read_item, value) -> None:
        raise pickle.UnpicklingError(f"refused the object item {read_item.dest_index.fqn}")


def split_optimizer_state(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """An optimizer state dict (get_optimizer_state_dict's) as (its tensors, the rest: param groups)."""
    return state.get("state", {}), {"param_groups": state.get("param_groups", [])}


def save_sharded(checkpoint: dict[str, Any], path: Path, rank: int, world_size: int, barrier, token: str) -> None:
    """Writes checkpoint into the directory path, every rank its shards; rank 0 writes meta.pt and renames the
    finished directory into place after every rank has written. token: the same on every rank."""
    partial = path.with_name(f".{path.name}{PARTIAL_MARK}{token}")
    optimizer_states = checkpoint.pop("optimizer_states", [])
    tensors = {"state_dict": checkpoint.pop("state_dict")}
    groups = []
    for index, optimizer_state in enumerate(optimizer_states):
        tensors[f"optimizer_{index}"], rest = split_optimizer_state(optimizer_state)
        groups.append(rest)
    dcp.save(tensors, storage_writer=FileSystemWriter(partial))
    barrier()  # every rank's shards are on disk: rank 0 digests them all into meta.pt
    if rank == 0:
        atomic_torch_save({**checkpoint, "optimizer_states": groups, "world_size": world_size,
                           "file_digests": file_digests(partial)}, partial / META_FILE)
        replace_directory(partial, path)
    barrier()


def replace_directory(new: Path, target: Path) -> None:
    """new renamed to target; an old target is moved aside first and removed after (never half there)."""
    old = target.with_name(f".{target.name}{OLD_MARK}{uuid.uuid4().hex[:8]}")
    if target.is_file():
        target.unlink()
    elif target.exists():
        os.rename(target, old)
    os.rename(new, target)
    fsync_directory(target.parent)
    shutil.rmtree(old, ignore_errors=True)
    for mark in (PARTIAL_MARK, OLD_MARK):  # what writers killed before left
        for leftover in target.parent.glob(f".{target.name}{mark}*"):
            shutil.rmtree(leftover, ignore_errors=True)


def file_digests(directory: Path) -> dict[str, str]:
    """{file name: BLAKE2 digest} of a sharded checkpoint's data files (.metadata and every rank's shards)."""
    digests = {}
    for path in sorted(directory.iterdir()):
        if path.name == META_FILE or not path.is_file():
            continue
        digest = hashlib.blake2b(digest_size=16)
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        digests[path.name] = digest.hexdigest()
    return digests


def refuse_links_and_foreign_files(path: Path) -> None:
    """A checkpoint directory holds plain files of its own: a symlink (to a file modified elsewhere, or anywhere
    outside the directory) or a subdirectory is refused before anything is read."""
    for entry in path.iterdir():
        if entry.is_symlink() or not entry.is_file():
            kind = "a symlink" if entry.is_symlink() else "not a plain file"
            raise ConfigError(f"ckpt_path={str(path)!r} holds {entry.name!r}, which is {kind}; a lit_rlhf checkpoint "
                              f"directory holds its own files only (copy the checkpoint, do not link into it).")


def verify_files(path: Path, meta: dict[str, Any]) -> None:
    """Every data file matches the digest written with it (checkpoints written before digests carry none)."""
    expected = meta.get("file_digests")
    if expected is None:
        return
    if not isinstance(expected, dict):
        raise ConfigError(f"ckpt_path={str(path)!r} has a malformed {META_FILE}; give a checkpoint written by "
                          f"lit_rlhf.")
    found = file_digests(path)
    for name in sorted(set(expected) | set(found)):
        if expected.get(name) != found.get(name):
            what = "is missing" if name not in found else "was not written with it" if name not in expected else \
                "does not match the digest written with it (changed or corrupted on disk)"
            raise ConfigError(f"ckpt_path={str(path)!r}: {name} {what}; resume from another checkpoint of the run.")


def read_meta(path: Path) -> dict[str, Any]:
    """meta.pt of a sharded checkpoint, after the directory's files are checked (no links, every digest)."""
    refuse_links_and_foreign_files(path)
    meta_file = path / META_FILE
    if not meta_file.is_file():
        raise ConfigError(f"ckpt_path={str(path)!r} is a directory without {META_FILE}; give a checkpoint written "
                          f"by lit_rlhf (a .ckpt file, or a sharded .ckpt directory of trainer=fsdp2).")
    try:
        meta = torch.load(meta_file, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as err:
        reason = clipped_first_line(err, default=type(err).__name__)
        raise ConfigError(f"ckpt_path={str(path)!r} has a {META_FILE} that cannot be read as weights only "
                          f"({reason}); lit_rlhf's checkpoints hold tensors and plain values, never code.") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("world_size"), int):
        raise ConfigError(f"ckpt_path={str(path)!r} has a malformed {META_FILE}; give a checkpoint written by "
                          f"lit_rlhf.")
    verify_files(path, meta)
    return meta


def load_tensors(path: Path, state: dict[str, Any], single_process: bool = False) -> None:
    """DCP load, in place, into state's tensors (DTensors are resharded to their own layout). single_process: this
    process reads alone, even inside a distributed run (rank zero exporting at the end of training)."""
    try:
        with warnings.catch_warnings():  # one process reading a checkpoint whole (export, evaluate) is intended
            warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
            dcp.load(state, storage_reader=SafeReader(path), planner=TensorsOnlyPlanner(), no_dist=single_process)
    except (CheckpointException, pickle.UnpicklingError, RuntimeError, ValueError, OSError, EOFError) as err:
        # DCP reports a failure of any rank as a CheckpointException holding each rank's traceback
        refused = re.search(r"refused [^\n]*", str(err))
        if refused:
            raise ConfigError(f"ckpt_path={str(path)!r} was {refused.group(0).split(':')[0]}: lit_rlhf's sharded "
                              f"checkpoints hold tensors only, never code; give a checkpoint written by "
                              f"lit_rlhf.") from None
        first = " ".join(str(err).split())[-160:]
        raise ConfigError(f"ckpt_path={str(path)!r} cannot be read ({type(err).__name__}: ...{first}); resume from "
                          f"another checkpoint of the run.") from None


def check_declared_sizes(path: Path, declared: dict[str, TensorStorageMetadata]) -> None:
    """The tensors .metadata declares fit in the shards on disk (they are stored there raw): a crafted size (2**50
    elements) is one line, not an allocation."""
    try:
        declared_bytes = sum(math.prod(int(d) for d in item.size) * torch.empty((), dtype=item.properties.dtype)
                             .element_size() for item in declared.values())
    except (TypeError, ValueError, AttributeError, RuntimeError):
        raise ConfigError(f"ckpt_path={str(path)!r} has a .metadata with malformed tensor sizes; give a checkpoint "
                          f"written by lit_rlhf.") from None
    on_disk = sum(p.stat().st_size for p in path.glob("*.distcp"))
    if declared_bytes > on_disk:
        raise ConfigError(f"ckpt_path={str(path)!r}: its .metadata declares {declared_bytes} bytes of tensors and its "
                          f"shards hold {on_disk}; give a checkpoint written by lit_rlhf.")


def read_sharded_checkpoint(path: str | Path) -> dict[str, Any]:
    """A sharded checkpoint directory as one plain checkpoint (full trained tensors, on the CPU), read in this
    process alone."""
    path = Path(path)
    meta = read_meta(path)
    try:
        with open(path / ".metadata", "rb") as file:
            metadata = load_dcp_metadata(file)
    except (OSError, pickle.UnpicklingError) as err:
        raise ConfigError(f"ckpt_path={str(path)!r} has an unreadable .metadata ({err}); give a checkpoint written "
                          f"by lit_rlhf.") from None
    declared = {name: item for key, item in metadata.state_dict_metadata.items()
                for group, _, name in [key.partition(".")]
                if group == "state_dict" and isinstance(item, TensorStorageMetadata)}
    check_declared_sizes(path, declared)
    state: dict[str, Any] = {"state_dict": {}}
    for name, item in declared.items():
        state["state_dict"][name] = torch.empty(item.size, dtype=item.properties.dtype)
    load_tensors(path, state, single_process=True)
    meta.pop("optimizer_states", None)  # a plain checkpoint for weights (export, evaluate), not a resume
    return {**meta, "state_dict": state["state_dict"]}

