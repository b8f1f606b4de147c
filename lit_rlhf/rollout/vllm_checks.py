"""What VLLMEngine checks and arranges around vLLM: its import, the sampling settings, the KV cache's size, the
device the engine starts on, and calls bounded in time."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.rollout.sampling import check_unbiased

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


def run_bounded(call: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """call() in a daemon thread; a TimeoutError after timeout_s (the thread is left behind, so a hung engine
    cannot keep the process alive), the call's own exception if it raised."""
    result: dict[str, Any] = {}

    def target():
        try:
            result["value"] = call()
        except BaseException as err:  # handed to the caller's thread
            result["error"] = err

    thread = threading.Thread(target=target, name=what, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not finish in {timeout_s:g} s")
    if "error" in result:
        raise result["error"]
    return result.get("value")


def kv_cache_bytes_per_token(config: Any, element_size: int) -> int | None:
    """Keys and values of every layer for one token, from a transformers config (None if it does not say)."""
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    hidden = getattr(config, "hidden_size", None)
    if not (layers and heads and hidden):
        return None
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    return 2 * layers * kv_heads * head_dim * element_size


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


def engine_cpu_cores(threads: int, local_rank: int) -> str:
    """The cores a CPU engine computes on, as vLLM's VLLM_CPU_OMP_THREADS_BIND lists them ("0,1"). The trainer
    waits while the engine samples, so the engine takes the trainer's share: `threads` of the cores this process
    may run on, the local_rank-th such share under DDP. (vLLM's own default keeps one core for its scheduler and
    computes on the rest: one of two cores here, half the speed of generate.)"""
    allowed = sorted(os.sched_getaffinity(0))
    count = max(1, min(threads, len(allowed)))
    start = (local_rank * count) % len(allowed)
    return ",".join(str(core) for core in (allowed + allowed)[start:start + count])


@contextmanager
def environment(**values: str):
    """Environment variables set while the engine's processes start (they inherit them), restored after."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def engine_device(device: torch.device, cpu_cores: str | None = None, local_rank: int = 0):
    """Starts the engine on the trainer's device. GPU: vLLM takes the first visible device, so a rank's own device
    is made the only visible one while the engine process starts. CPU: the engine computes on `cpu_cores` (None:
    the trainer's share, engine_cpu_cores), unless VLLM_CPU_OMP_THREADS_BIND is set already."""
    if device.type == "cuda":
        saved = os.environ.get("CUDA_VISIBLE_DEVICES")
        visible = saved.split(",") if saved else [str(i) for i in range(torch.cuda.device_count())]
        with environment(CUDA_VISIBLE_DEVICES=visible[device.index or 0]):
            yield
    elif device.type == "cpu" and (cpu_cores or "VLLM_CPU_OMP_THREADS_BIND" not in os.environ):
        cores = cpu_cores or engine_cpu_cores(torch.get_num_threads(), local_rank)
        with environment(VLLM_CPU_OMP_THREADS_BIND=str(cores)):
            yield
    else:
        yield
