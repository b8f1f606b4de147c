"""A static KV cache and a compiled decoding step for HFEngine (`rollout.compile_mode`).

generate() compiles the model's forward of a decoding step (one new position per sequence) with torch.compile when
its KV cache has a fixed shape; the prefill stays eager. A static cache is preallocated for `length` positions, so
every decoding step runs the same shapes: the compiled graph is reused from step to step and from RL step to RL step
(new graphs only for a new batch size, cache length, or the reference's adapters-off forward). Lengths are rounded
up to a multiple of CACHE_BUCKET so that prompts of varying length share graphs.

Sampling is unchanged: the logits processors and the sampler run after the compiled forward, on its logits.
"""

from __future__ import annotations

import torch
from transformers import CompileConfig, DynamicCache, StaticCache

from lit_rlhf.errors import ConfigError

COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # torch.compile's modes that capture CUDA graphs
# the setting's default: CUDA graphs on CUDA, where a decoding step is mostly kernel launches; plain generate() on a
# CPU, where compiling costs a first call of seconds (and a C++ compiler) for a smaller gain
AUTO = "auto"
CACHE_BUCKET = 64


def check_compile_mode(mode: str | None) -> None:
    if mode is not None and mode != AUTO and mode not in COMPILE_MODES:
        raise ConfigError(f"rollout.compile_mode={mode!r} is not a torch.compile mode; use auto, null (plain "
                          f"generate()) or one of {', '.join(COMPILE_MODES)}.")


def resolve_mode(mode: str | None, device: torch.device) -> str | None:
    """The mode that runs on `device`: auto is reduce-overhead on CUDA and None (plain generate()) elsewhere."""
    if mode != AUTO:
        return mode
    return "reduce-overhead" if device.type == "cuda" else None


def check_mode_runs_on(mode: str, device: torch.device) -> None:
    """A mode that captures CUDA graphs cannot run on another device: one line, before anything is sampled."""
    if mode in CUDA_GRAPH_MODES and device.type != "cuda":
        raise ConfigError(f"rollout.compile_mode={mode} captures CUDA graphs, but the policy samples on "
                          f"{device.type}; use rollout.compile_mode=default (or max-autotune-no-cudagraphs), or "
                          f"null.")


def unavailable_reason(device: torch.device) -> str | None:
    """Why torch.compile cannot compile here (None where it can): an unsupported platform, or, for a CPU step,
    no C++ compiler for inductor's kernels."""
    if not torch._dynamo.is_dynamo_supported():
        return "torch.compile is not supported on this platform or Python version"
    if device.type == "cpu":
        from torch._inductor.cpp_builder import get_cpp_compiler
        try:
            get_cpp_compiler()
        except Exception as err:  # inductor's own check: no compiler on PATH (or $CXX is not one)
            return f"no C++ compiler for inductor's CPU kernels ({type(err).__name__}); install g++ or set $CXX"
    return None


def model_context(model: torch.nn.Module) -> int | None:
    """The positions the model was trained for (config.max_position_embeddings), if it says (a multimodal config
    says it in its text config)."""
    config = getattr(model, "config", None)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text_config, "max_position_embeddings", None)


def check_static_cache_length(length: int | None, context: int | None) -> None:
    if length is None:
        return
    if length < 1:
        raise ConfigError(f"rollout.static_cache_length={length} must be >= 1 (or null: sized per call).")
    if context is not None and length > context:
        raise ConfigError(f"rollout.static_cache_length={length} is longer than the model's context "
                          f"({context} positions); set at most {context}, or null (sized per call).")


def cache_length(needed: int, setting: int | None, context: int | None) -> int:
    """Positions of the static cache for a call needing `needed` (context + new tokens)."""
    if setting is not None:
        if needed > setting:
            raise ConfigError(f"rollout.static_cache_length={setting} is shorter than this call's context + "
                              f"response ({needed} tokens); raise it (at most the model's context) or set null.")
        return setting
    if context is not None and needed >= context:
        return needed  # past the model's context: as plain generate() would run it
    bucketed = -(-needed // CACHE_BUCKET) * CACHE_BUCKET
    return bucketed if context is None else min(bucketed, context)


def compile_config(mode: str) -> CompileConfig:
    config = CompileConfig(mode=mode)
    config._compile_all_devices = True  # generate() compiles on CUDA (and a few others) only, unless told so
    return config


def static_cache(model: torch.nn.Module, length: int, prefilled: DynamicCache | None = None) -> StaticCache:
    """An empty static cache of `length` positions, or one holding `prefilled`'s keys and values (its rows as they
    are: the shared prefill's are already repeated K times)."""
    cache = StaticCache(config=model.config, max_cache_len=length)
    for layer in cache.layers:
        store_in_the_cache_dtypes(layer)
    if prefilled is not None:
        for layer, source in zip(cache.layers, prefilled.layers, strict=True):
            layer.update(source.keys, source.values)
    return cache


def store_in_the_cache_dtypes(layer) -> None:
    """Each update's keys and values cast to the dtypes the layer allocated. transformers before 5.24 allocates a
    static layer's values in its keys' dtype, and its dynamic cache (the shared prefill) concatenates new values onto
    ones of the keys' dtype; under autocast over float32 weights (precision=bf16-mixed) the two differ (GPT-NeoX's
    keys leave the rotary embedding in float32, its values the projection in bfloat16), and the static cache's first
    update failed ("index_copy_(): ... Float and ... BFloat16"). Cast, the values are stored as plain generate()'s
    cache stores them on that version; a no-op where the dtypes agree."""
    store = layer.update

    def update(key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not layer.is_initialized:
            layer.lazy_initialization(key_states, value_states)
        return store(key_states.to(layer.keys.dtype), value_states.to(layer.values.dtype), *args, **kwargs)

    layer.update = update


def is_compile_failure(err: BaseException) -> bool:
    """An error of torch.compile itself (tracing, or the backend's compiler: inductor's errors derive from it), not
    of the model or the sampler."""
    return isinstance(err, torch._dynamo.exc.TorchDynamoException)
