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
import os
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

from lit_rlhf.checkpoint_io import PARTIAL_MARK, atomic_torch_save, fsync_directory
from lit_rlhf.errors import ConfigError

META_FILE = "meta.pt"  # Lightning's name for a sharded checkpoint's metadata
OLD_MARK = ".replaced-"  # a checkpoint being replaced (PARTIAL_MARK: one being written)
TORCH_VALUE_TYPES = (torch.dtype, torch.layout, torch.memory_format)


class MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP's metadata: its own dataclasses and enums (classes only: a function of DCP's, such as one that
    converts a torch.save file, would run with the pickle's arguments), torch sizes, dtypes and layouts, paths,
    plain containers."""

    METADATA_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")
    ALLOWED = {("builtins", "set"), ("builtins", "frozenset"), ("builtins", "object"), ("collections", "OrderedDict"),
               ("copyreg", "_reconstructor"), ("torch", "Size"), ("torch.serialization", "_get_layout"),
               ("pathlib", "PosixPath"), ("pathlib", "WindowsPath")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
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
            metadata = MetadataUnpickler(file).load()
        if not isinstance(metadata, Metadata):
            raise pickle.UnpicklingError("a checkpoint's .metadata holds no DCP metadata")
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
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
    if rank == 0:
        atomic_torch_save({**checkpoint, "optimizer_states": groups, "world_size": world_size}, partial / META_FILE)
    barrier()
    if rank == 0:
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


def read_meta(path: Path) -> dict[str, Any]:
    meta_file = path / META_FILE
    if not meta_file.is_file():
        raise ConfigError(f"ckpt_path={str(path)!r} is a directory without {META_FILE}; give a checkpoint written "
                          f"by lit_rlhf (a .ckpt file, or a sharded .ckpt directory of trainer=fsdp2).")
    meta = torch.load(meta_file, map_location="cpu", weights_only=True)
    if not isinstance(meta, dict) or not isinstance(meta.get("world_size"), int):
        raise ConfigError(f"ckpt_path={str(path)!r} has a malformed {META_FILE}; give a checkpoint written by "
                          f"lit_rlhf.")
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


def read_sharded_checkpoint(path: str | Path) -> dict[str, Any]:
    """A sharded checkpoint directory as one plain checkpoint (full trained tensors, on the CPU), read in this
    process alone."""
    path = Path(path)
    meta = read_meta(path)
    try:
        with open(path / ".metadata", "rb") as file:
            metadata = MetadataUnpickler(file).load()
    except (OSError, pickle.UnpicklingError, EOFError) as err:
        raise ConfigError(f"ckpt_path={str(path)!r} has an unreadable .metadata ({type(err).__name__}); give a "
                          f"checkpoint written by lit_rlhf.") from err
    state: dict[str, Any] = {"state_dict": {}}
    for key, item in metadata.state_dict_metadata.items():
        group, _, name = key.partition(".")
        if group == "state_dict" and isinstance(item, TensorStorageMetadata):
            state["state_dict"][name] = torch.empty(item.size, dtype=item.properties.dtype)
    load_tensors(path, state, single_process=True)
    meta.pop("optimizer_states", None)  # a plain checkpoint for weights (export, evaluate), not a resume
    return {**meta, "state_dict": state["state_dict"]}

