"""What VLLMEngine checks and arranges around vLLM: its import, the sampling settings, the KV cache's size, and
the device (GPU) or cores (CPU) the engine computes on."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any

import torch

from lit_rlhf.config.sampling_checks import check_unbiased
from lit_rlhf.errors import ConfigError

INSTALL_HINT = ("pip install -e '.[vllm]' where a GPU build of vLLM fits your torch, or make setup-vllm for the "
                "CPU build in its own environment .venv-vllm")
# algo.generation_kwargs that vLLM's SamplingParams also has (under its own name); only with allow_biased_sampling
VLLM_SAMPLING_NAMES = {"top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "repetition_penalty": "repetition_penalty",
                       "min_new_tokens": "min_tokens"}


def import_vllm():
    try:
        import vllm
    except ImportError as err:
        raise ConfigError(f"rollout=vllm needs vLLM, which is not installed here ({err}): {INSTALL_HINT}.") from err
    return vllm


def vllm_sampling_settings(temperature: float, generation_kwargs: dict[str, Any],
                           allow_biased_sampling: bool) -> dict[str, Any]:
    """SamplingParams settings of pure sampling (temperature only), plus the generation_kwargs a user opted into."""
    check_unbiased(generation_kwargs, allow_biased_sampling)
    settings = {"temperature": temperature, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
    for key, value in generation_kwargs.items():
        if key not in VLLM_SAMPLING_NAMES:
            raise ConfigError(f"algo.generation_kwargs.{key} has no vLLM counterpart; remove it or use rollout=hf.")
        settings[VLLM_SAMPLING_NAMES[key]] = -1 if key == "top_k" and value in (None, 0) else value
    return settings


def attention_head_dim(config: Any) -> int | None:
    """The dimension of an attention head, from a transformers config (None if it does not say)."""
    heads = getattr(config, "num_attention_heads", None)
    hidden = getattr(config, "hidden_size", None)
    return getattr(config, "head_dim", None) or (hidden // heads if heads and hidden else None)


def kv_cache_bytes_per_token(config: Any, element_size: int) -> int | None:
    """Keys and values of every layer for one token, from a transformers config (None if it does not say)."""
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    head_dim = attention_head_dim(config)
    if not (layers and heads and head_dim):
        return None
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return 2 * layers * kv_heads * head_dim * element_size


def check_cpu_head_dim(config: Any, name_or_path: str) -> None:
    """vLLM's CPU attention runs a fixed set of head dimensions; another is refused up front (the engine itself says
    so only at the first request, from its process)."""
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    except ImportError:  # another vLLM layout: its engine's own error stands
        return
    head_dim, supported = attention_head_dim(config), CPUAttentionBackend.get_supported_head_sizes()
    if head_dim is not None and head_dim not in supported:
        raise ConfigError(f"vLLM's CPU build cannot run the attention heads of model.name_or_path={name_or_path!r} "
                          f"({head_dim} dimensions; it runs {', '.join(map(str, supported))}): use rollout=hf, or "
                          f"rollout=vllm on a GPU.")


def check_kv_cache(config: Any, kv_cache_gib: float | None, max_model_len: int | None, element_size: int) -> None:
    """vLLM needs room for one sequence of max_model_len tokens; refuse a kv_cache_gib below that up front
    (the engine's own error is only in its process's log)."""
    per_token = kv_cache_bytes_per_token(config, element_size)
    if kv_cache_gib is None or per_token is None:
        return
    tokens = max_model_len or getattr(config, "max_position_embeddings", None) or 0
    if kv_cache_gib * 2**30 < per_token * tokens:
        needed = per_token * tokens / 2**30
        raise ConfigError(f"rollout.kv_cache_gib={kv_cache_gib} cannot hold one sequence of {tokens} tokens "
                          f"({needed:.3g} GiB); raise rollout.kv_cache_gib or lower rollout.max_model_len.")


def engine_cpu_cores(chosen: list[int] | None, threads: int, local_rank: int) -> list[int]:
    """The cores a CPU engine computes on: `chosen` (rollout.cpu_cores), else the trainer's share. The trainer
    waits while the engine samples, so the engine takes `threads` of the cores this process may run on, the
    local_rank-th such share under DDP. (vLLM's own CPU default keeps a core for its scheduler process: on 2
    cores, it computes on one.)"""
    allowed = sorted(os.sched_getaffinity(0))
    if chosen is not None:
        if not set(chosen) <= set(allowed):
            raise ConfigError(f"rollout.cpu_cores lists cores {sorted(set(chosen) - set(allowed))} this process may "
                              f"not run on (it may use {allowed}); list some of those, or null.")
        return chosen
    count = max(1, min(threads, len(allowed)))
    start = (local_rank * count) % len(allowed)
    return (allowed + allowed)[start:start + count]


def parse_cores(cores: str | int | None) -> list[int] | None:
    """rollout.cpu_cores as a list: "0-3,6" -> [0, 1, 2, 3, 6]."""
    if cores is None:
        return None
    try:
        listed = []
        for part in str(cores).split(","):
            first, _, last = part.strip().partition("-")
            listed.extend(range(int(first), int(last or first) + 1))
    except ValueError:
        listed = []
    if not listed or min(listed) < 0:
        raise ConfigError(f"rollout.cpu_cores={cores!r} is not a list of cores; write it as \"0-7\" or \"0,2,4\" "
                          f"(or null: the trainer's share).")
    return listed


@contextmanager
def engine_device(device: torch.device):
    """Starts the engine on the trainer's GPU: vLLM takes the first visible device, so a rank's own device is
    made the only visible one while the engine process starts. Nothing to do on CPU."""
    if device.type != "cuda":
        yield
        return
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = saved.split(",") if saved else [str(i) for i in range(torch.cuda.device_count())]
    os.environ["CUDA_VISIBLE_DEVICES"] = visible[device.index or 0]
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
