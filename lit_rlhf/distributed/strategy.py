"""FSDP2Strategy (trainer=fsdp2): Lightning's ModelParallelStrategy as pure sharded data parallelism.

Lightning's ModelParallelStrategy (FSDP2 + tensor parallelism) is the strategy whose `configure_model` hook
applies torch's `fully_shard`, on every accelerator including CPU (gloo). lit_rlhf uses its data-parallel
dimension only: every rank is a data-parallel rank holding a shard of each model (tensor parallelism would
split each sequence's forward, which sampling on gathered weights does not need). Checkpoints are sharded
directories (lit_rlhf/checkpoints/sharded.py), or one full file with save_distributed_checkpoint=false.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from lit_rlhf.checkpoints.loading import load_checkpoint_file
from lit_rlhf.checkpoints.sharded import load_tensors, read_meta, save_sharded
from lit_rlhf.config.validation import check_flag
from lit_rlhf.distributed.host_memory import check_mmap_threshold, set_host_mmap_threshold
from lit_rlhf.errors import ConfigError, writing


class FSDP2Strategy(ModelParallelStrategy):
    """ModelParallelStrategy with data_parallel_size = world size and tensor_parallel_size = 1.

    sharded_loading: models are built without storage and each rank reads only its shards from the model's
    safetensors files (false: every rank loads the whole model, then shards it).
    sharded_sampling: rollouts run on the sharded model, each block gathered as the forward reaches it and freed
    after (false: the whole weights gathered once per rollout).
    cpu_offload: sharded parameters, gradients and optimizer state live in CPU memory (FSDP2's CPUOffloadPolicy),
    copied to the device block by block.
    host_mmap_threshold_mib: host tensors of at least this many MiB get memory of their own from the system and
    give it back when freed (glibc's M_MMAP_THRESHOLD), so a rank's RSS follows its live tensors (None: glibc's
    default, which keeps freed blocks up to 32 MiB for reuse)."""

    def __init__(self, save_distributed_checkpoint: bool = True, sharded_loading: bool = True,
                 sharded_sampling: bool = False, cpu_offload: bool = False,
                 host_mmap_threshold_mib: int | None = None, **kwargs):
        for name, value in (("save_distributed_checkpoint", save_distributed_checkpoint),
                            ("sharded_loading", sharded_loading), ("sharded_sampling", sharded_sampling),
                            ("cpu_offload", cpu_offload)):
            check_flag(f"trainer.strategy.{name}", value)
        super().__init__(data_parallel_size="auto", tensor_parallel_size=1,
                         save_distributed_checkpoint=save_distributed_checkpoint, **kwargs)
        self.sharded_loading, self.sharded_sampling, self.cpu_offload = sharded_loading, sharded_sampling, cpu_offload
        self.host_mmap_threshold_mib = check_mmap_threshold(host_mmap_threshold_mib)

    def setup_environment(self) -> None:
        self._data_parallel_size = self.num_nodes * self.num_processes  # every rank shards, across nodes too
        if self.host_mmap_threshold_mib is not None:  # in every rank's process, before any model loads
            set_host_mmap_threshold(self.host_mmap_threshold_mib)
        super().setup_environment()

    def optimizer_state(self, optimizer) -> dict[str, Any]:
        """Keyed by parameter name (whole tensors on rank 0 for a full file, this rank's shards otherwise)."""
        optimizer = getattr(optimizer, "_optimizer", optimizer)  # a LightningOptimizer's
        options = StateDictOptions(full_state_dict=not self._save_distributed_checkpoint, cpu_offload=True)
        return get_optimizer_state_dict(self.model, optimizer, options=options)

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath, storage_options: Any | None = None) -> None:
        if not self._save_distributed_checkpoint:  # one full file, gathered on rank 0 (its checkpoint_io writes it)
            checkpoint["world_size"] = self.world_size
            return super().save_checkpoint(checkpoint, filepath, storage_options)
        path = Path(self.broadcast(str(filepath)))
        token = self.broadcast(uuid.uuid4().hex[:8])
        with writing(path):
            save_sharded(checkpoint, path, self.global_rank, self.world_size, self.barrier, token)

    def load_checkpoint(self, checkpoint_path, weights_only: bool | None = None) -> dict[str, Any]:
        path = Path(self.broadcast(str(checkpoint_path)))
        if not path.is_dir():
            return self.load_full_checkpoint(path)
        meta = read_meta(path)
        self.check_world_size(path, meta.get("world_size"))
        keys = self.lightning_module.trained_state_keys()
        model_state = {k: v for k, v in get_model_state_dict(self.model).items() if k in keys}
        state: dict[str, Any] = {"state_dict": model_state}
        for index, optimizer in enumerate(self.optimizers):
            state[f"optimizer_{index}"] = get_optimizer_state_dict(self.model, optimizer)["state"]
        load_tensors(path, state)
        set_model_state_dict(self.model, model_state, options=StateDictOptions(strict=False))
        groups = meta.get("optimizer_states") or []
        for index, optimizer in enumerate(self.optimizers):
            full = {"state": state[f"optimizer_{index}"], "param_groups": groups[index]["param_groups"]}
            set_optimizer_state_dict(self.model, optimizer, full)
        return {**meta, "state_dict": model_state, "optimizer_states": groups}

    def check_world_size(self, path: Path, world_size: int | None) -> None:
        if world_size is None:
            raise ConfigError(f"ckpt_path={str(path)!r} was not written by trainer=fsdp2; resume it with the trainer "
                              f"that wrote it, or export it (python -m lit_rlhf.export) and train on from the "
                              f"exported model.")
        if world_size != self.world_size:
            raise ConfigError(f"ckpt_path={str(path)!r} was written by {world_size} ranks and this run has "
                              f"{self.world_size}; resume it on {world_size} ranks (trainer.devices x "
                              f"trainer.num_nodes), or export it (python -m lit_rlhf.export) and train on from the "
                              f"exported model.")

    def load_full_checkpoint(self, path: Path) -> dict[str, Any]:
        """A full file (save_distributed_checkpoint=false), read weights-only by every rank, sharded on loading."""
        checkpoint = load_checkpoint_file(path)
        self.check_world_size(path, checkpoint.get("world_size"))
        full = StateDictOptions(full_state_dict=True, strict=False)
        set_model_state_dict(self.model, checkpoint["state_dict"], options=full)
        for optimizer, state in zip(self.optimizers, checkpoint.get("optimizer_states", []), strict=True):
            set_optimizer_state_dict(self.model, optimizer, state, options=full)
        return checkpoint
