"""FSDP2 (torch's `fully_shard`) applied to the module's models, and the full weights gathered where sampling
needs them.

Every transformer block (the classes a Hugging Face model lists in `_no_split_modules`) is its own FSDP unit, as
are the input embeddings (unless tied to the head), then the model's root (final norm, head). With LoRA the
frozen base weights are sharded beside the trainable adapters; a full fine-tune's frozen reference copy and PPO's
critic are sharded the same way.

Updates run sharded: each block's parameters are all-gathered for its forward and backward and freed after, and
gradients are reduce-scattered (averaged over ranks, as DDP does). A rollout runs on gathered weights
(`gathered_weights`): every FSDP unit is unsharded once, generation and the no-grad forwards run without any
collective (ranks may take different numbers of turns or forwards), and the weights are resharded after it.
The price is one full copy of the weights per rank during the rollout, which generation needs anyway.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from peft import PeftModel
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, fully_shard

from lit_rlhf.distributed.host_memory import release_freed_host_memory
from lit_rlhf.distributed.host_reduce_scatter import use_piecewise_reduce_scatter
from lit_rlhf.distributed.meta_loading import materialize, placeholders_to_meta
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.output_layer import FLOAT32_HEAD_UNDER_FSDP2, Float32OutputLayer

# the modules inside a gathered_weights block now (the block is re-entrant: an inner one does nothing)
GATHERED: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


def block_classes(model: torch.nn.Module) -> set[str]:
    """The class names of a model's transformer blocks (Hugging Face's `_no_split_modules`)."""
    for module in model.modules():
        names = getattr(module, "_no_split_modules", None)
        if names:
            return set(names)
    return set()


def shard(model: torch.nn.Module, mesh, cpu_offload: bool = False) -> None:
    """fully_shard every transformer block of model, then its root: the Hugging Face model itself, under peft's
    wrappers, whose forward every path takes (peft's forward and `generate` alike). FSDP2 takes the first
    unit to run a forward as the root, so the root must be the outermost module that every forward enters.
    cpu_offload: the shards, their gradients and (so) the optimizer state in CPU memory (FSDP2's CPUOffloadPolicy)."""
    root = model.get_base_model() if isinstance(model, PeftModel) else model
    if isinstance(root.get_output_embeddings() if hasattr(root, "get_output_embeddings") else None,
                  Float32OutputLayer):
        raise ConfigError(FLOAT32_HEAD_UNDER_FSDP2)
    # pinned host memory speeds the copies to a GPU; on a CPU-only run there is no device to pin for
    policy = {"offload_policy": CPUOffloadPolicy(pin_memory=mesh.device_type == "cuda")} if cpu_offload else {}
    blocks = block_classes(root)
    for module in list(root.modules()):
        if module is not root and type(module).__name__ in blocks and not isinstance(module, FSDPModule):
            fully_shard(module, mesh=mesh, **policy)
    # the input embeddings are a unit of their own, gathered for the forward's first step (on small models they are
    # a quarter of the weights); not when tied to the head, which must stay in the root
    embeddings = root.get_input_embeddings() if hasattr(root, "get_input_embeddings") else None
    head = root.get_output_embeddings() if hasattr(root, "get_output_embeddings") else None
    if embeddings is not None and (head is None or head.weight is not embeddings.weight):
        lookup_only = type(embeddings) is torch.nn.Embedding  # fully_shard changes the class: asked before
        fully_shard(embeddings, mesh=mesh, **policy)
        if lookup_only and hasattr(embeddings, "set_unshard_in_backward"):
            # a lookup's gradient needs the indices, not the table: the backward's last step gathers nothing (a
            # LoRA-wrapped embedding needs its adapters there and is gathered as usual)
            embeddings.set_unshard_in_backward(False)
    # the root's weights (final norm, head) stay gathered from its forward to its backward: the head's weight is
    # also used outside the forward (chunked logprobs), and the backward would gather it again at once
    fully_shard(root, mesh=mesh, reshard_after_forward=False, **policy)
    for unit in fsdp_units(root):
        unit._reshards_after_forward = unit is not root  # what gathered_weights restores
    if mesh.device_type == "cpu":  # gloo: its reduce-scatter copies each unit's whole gradient once more
        use_piecewise_reduce_scatter(fsdp_units(root))


def shard_and_load(models: list[torch.nn.Module], mesh, device: torch.device, cpu_offload: bool = False) -> None:
    """fully_shard each model over mesh (see shard), then give each rank's shards storage on device, filled from the
    model's files where the model was built with placeholders (sharded loading; whole models keep their values)."""
    for model in models:
        placeholders_to_meta(model)
        shard(model, mesh, cpu_offload=cpu_offload)
    for model in models:  # sharded loading: each rank reads its shards now
        materialize(model, device)


def sharded_models_line(models: int, ranks: int, sharded_loading: bool, then: str = "", offload: bool = False) -> str:
    """The line a sharded run says at start: over how many ranks, how many models, how they were read; `then`
    (e.g. how rollouts sample) follows."""
    how = ("each rank read only its shards from the model files (trainer.strategy.sharded_loading=true)"
           if sharded_loading else "each rank loaded the whole models, then kept its shards "
           "(trainer.strategy.sharded_loading=false)")
    offloaded = ", shards and optimizer state offloaded to the CPU" if offload else ""
    return f"FSDP2 over {ranks} ranks, {models} model{'s' if models > 1 else ''} sharded: {how}{then}{offloaded}."


def fsdp_units(module: torch.nn.Module) -> list[FSDPModule]:
    return [m for m in module.modules() if isinstance(m, FSDPModule)]


def root_units(units: list[FSDPModule]) -> list[FSDPModule]:
    """The units no other unit contains (each model's root)."""
    inner = {id(m) for unit in units for m in unit.modules() if m is not unit}
    return [unit for unit in units if id(unit) not in inner]


def is_sharded(module: torch.nn.Module) -> bool:
    return any(isinstance(m, FSDPModule) for m in module.modules())


@contextmanager
def gathered_weights(module: torch.nn.Module) -> Iterator[float]:
    """Every FSDP unit under module unsharded for the length of the block (forwards then all-gather nothing),
    resharded after; gives the seconds the all-gather took (0 when nothing was gathered). Re-entrant: an inner
    block inside an outer one does nothing. Every rank must enter it."""
    units = fsdp_units(module)
    if not units or module in GATHERED:
        yield 0.0
        return
    start = time.perf_counter()
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
    for unit in units:
        unit.unshard()
    GATHERED.add(module)
    took = time.perf_counter() - start
    try:
        yield took
    finally:
        GATHERED.discard(module)
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(unit._reshards_after_forward, recurse=False)  # as shard() set them
        release_freed_host_memory()


@contextmanager
def resharded_after(module: torch.nn.Module) -> Iterator[float]:
    """Sampling on the sharded weights: each forward gathers the blocks it reaches (every rank runs the same
    forwards); after the block the model roots, which stay gathered after a forward until the backward, are
    resharded too, so a frozen model (a full fine-tune's reference) keeps no whole root. Gives 0.0 (gathered up
    front: nothing)."""
    try:
        yield 0.0
    finally:
        for unit in root_units(fsdp_units(module)):
            unit.reshard()
        release_freed_host_memory()


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (a plain tensor is itself)."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor gathered whole (a collective: every rank calls it); a plain tensor is itself."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
