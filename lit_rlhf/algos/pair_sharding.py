"""trainer=fsdp2 for the models fitted offline (train_dpo.py, train_kto.py, train_sft.py, train_reward_model.py): the
policy or the reward model, and a full fine-tune's frozen reference copy, are sharded as train.py's RL modules shard
theirs (every transformer block a unit; lit_rlhf.distributed.sharding), each rank reading only its shards from the
model files under sharded loading. A step's forwards and backward run on the shards, each block gathered as the
forward reaches it (every rank runs the same forwards: the data is dealt in equal batches). The saved model is
gathered whole on rank zero."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from lightning.pytorch.utilities import rank_zero_info
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from lit_rlhf.distributed.meta_loading import forget_weight_files
from lit_rlhf.distributed.sharding import fsdp_units, is_sharded, root_units, shard_and_load, sharded_models_line
from lit_rlhf.models import load_policy


def fsdp2_strategy(module) -> ModelParallelStrategy | None:
    """The module's trainer's strategy when it is Lightning's ModelParallelStrategy (trainer=fsdp2), else None."""
    strategy = module.trainer.strategy if module._trainer is not None else None
    return strategy if isinstance(strategy, ModelParallelStrategy) else None


def loads_sharded(module) -> bool:
    """Whether the models are built with placeholders, each rank reading its shards once sharded
    (trainer.strategy.sharded_loading)."""
    return bool(getattr(fsdp2_strategy(module), "sharded_loading", False))


def shard_policy_models(module, models: list[torch.nn.Module]) -> None:
    """fully_shard models (the policy, a frozen reference copy) over the strategy's data-parallel ranks, said in one
    line."""
    strategy = fsdp2_strategy(module)
    mesh = module.device_mesh["data_parallel"]
    offload = bool(getattr(strategy, "cpu_offload", False))
    shard_and_load(models, mesh, strategy.root_device, cpu_offload=offload)
    rank_zero_info(sharded_models_line(len(models), mesh.size(), loads_sharded(module), offload=offload))


@contextmanager
def resharded_root(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """A sharded frozen model for no-grad forwards: its root (final norm, head), which stays gathered after a forward
    until the backward that a frozen model never runs, is resharded after the block (nothing for a whole model)."""
    try:
        yield model
    finally:
        for unit in root_units(fsdp_units(model)):
            unit.reshard()


def gathered_state(policy: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """The sharded policy's whole tensors by name on rank zero, in host memory (None elsewhere). A collective: every
    rank calls it."""
    state = get_model_state_dict(policy, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return state or None  # ranks other than zero get an empty dict


def whole_model(build: Callable[[bool], torch.nn.Module], state: dict[str, torch.Tensor],
                empty: bool) -> torch.nn.Module:
    """The model build(empty) makes (LoRA and all), holding `state`'s tensors. empty: built with placeholders (no
    memory) whose tensors become `state`'s, where the run loaded its shards alone; else loaded whole, then
    overwritten. Tied weights (input embeddings and head) stay one tensor."""
    model = build(empty)
    model.load_state_dict(state, strict=True, assign=empty)
    forget_weight_files(model)
    root = model.get_base_model() if hasattr(model, "get_base_model") else model
    if hasattr(root, "tie_weights"):
        root.tie_weights()  # assign sets each name's tensor: tied names become one again
    return model


def policy_builder(spec: dict[str, Any], tokenizer) -> Callable[[bool], torch.nn.Module]:
    """build(empty): the policy as `spec` builds it (LoRA and all), with placeholders where empty."""
    spec = {key: value for key, value in spec.items() if key != "tokenizer_name_or_path"}
    return lambda empty: load_policy(tokenizer=tokenizer, empty=empty, **spec)[0]


def whole_policy(spec: dict[str, Any], tokenizer, state: dict[str, torch.Tensor], empty: bool) -> torch.nn.Module:
    """The policy as `spec` builds it, holding `state`'s tensors (whole_model)."""
    return whole_model(policy_builder(spec, tokenizer), state, empty)


def model_to_save(module, model: torch.nn.Module, build: Callable[[bool], torch.nn.Module]) -> torch.nn.Module | None:
    """Every rank calls it: the model with whole weights on rank zero (gathered into what build(empty) makes when
    sharded), None on the other ranks of a sharded fit."""
    if not is_sharded(model):
        return model
    state = gathered_state(model)
    if state is None:
        return None
    return whole_model(build, state, empty=loads_sharded(module))


def policy_to_save(module) -> torch.nn.Module | None:
    """model_to_save for the module's policy."""
    return model_to_save(module, module.policy, policy_builder(dict(module.hparams.model), module.tokenizer))


def any_rank_not_finite(module, finite: bool) -> bool:
    """Whether this rank's check or another's found a value that is not finite (a sharded model's ranks each check
    their own shards of the gradients)."""
    flag = torch.tensor(0.0 if finite else 1.0, device=module.device)
    return bool(module.summed_over_ranks(flag) > 0)
