"""Pure sampling for rollouts: temperature only, unless the user explicitly opts into bias."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedTokenizerBase

from lit_rlhf.config.sampling_checks import check_unbiased
from lit_rlhf.errors import ConfigError, nearest


def stop_token_id(tokenizer: PreTrainedTokenizerBase, stop_token: str) -> int:
    """'eos' -> the EOS id; otherwise the id of that token, which must be one token of the vocabulary."""
    if stop_token == "eos":
        return tokenizer.eos_token_id
    token_id = tokenizer.convert_tokens_to_ids(stop_token)
    if token_id is None or token_id == tokenizer.unk_token_id and stop_token != tokenizer.unk_token:
        raise ConfigError(f"algo.stop_token={stop_token!r} is not a token of the vocabulary; use 'eos' or one token.")
    return token_id


def pure_sampling_config(response_length: int, temperature: float, stop_id: int, pad_id: int,
                         generation_kwargs: dict[str, Any] | None = None,
                         allow_biased_sampling: bool = False) -> GenerationConfig:
    if temperature <= 0:
        raise ConfigError(f"algo.temperature={temperature} must be > 0: RLHF rollouts sample.")
    if response_length < 1:
        raise ConfigError(f"algo.response_length={response_length} must be >= 1.")
    generation_kwargs = dict(generation_kwargs or {})
    known = GenerationConfig().to_dict()
    for key in generation_kwargs:
        if key not in known:
            hint = nearest(key, list(known), otherwise="see transformers' GenerationConfig")
            raise ConfigError(f"algo.generation_kwargs.{key} is not a generate() setting{hint}.")
    check_unbiased(generation_kwargs, allow_biased_sampling)
    settings = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0, min_new_tokens=0,
                    max_new_tokens=response_length, eos_token_id=stop_id, pad_token_id=pad_id)
    settings.update(generation_kwargs)
    return GenerationConfig(**settings)


# What a model's generation_config says about decoding that is not what to sample: kept while rollouts sample.
STRUCTURAL_SETTINGS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "use_cache",
                       "cache_implementation", "cache_config")
_swap_lock = threading.Lock()
_swapped: dict[int, list] = {}  # id(model) -> [its own generation_config, the generate() calls under way]


@contextmanager
def sampling_defaults_only(model: torch.nn.Module) -> Iterator[None]:
    """generate() takes every setting its generation_config leaves unset from the model's own generation_config (its
    folder's generation_config.json): a repetition_penalty, min_p, no_repeat_ngram_size, suppress_tokens or
    num_return_sequences there would change what the rollouts sample, and their shapes, without a word (Qwen2.5's
    instruct models ship repetition_penalty=1.05, temperature=0.7, top_p=0.8, top_k=20). While generate() runs, each
    transformers model in `model` has a generation_config of its token ids and cache settings only; its own comes
    back after the last call under way (the async producer's and the trainer's may overlap), so exports keep it."""
    owners = [m for m in model.modules() if isinstance(vars(m).get("generation_config"), GenerationConfig)]
    with _swap_lock:
        for owner in owners:
            entry = _swapped.setdefault(id(owner), [owner.generation_config, 0])
            if entry[1] == 0:
                kept = {key: getattr(entry[0], key, None) for key in STRUCTURAL_SETTINGS}
                owner.generation_config = GenerationConfig(**{k: v for k, v in kept.items() if v is not None})
            entry[1] += 1
    try:
        yield
    finally:
        with _swap_lock:
            for owner in owners:
                entry = _swapped[id(owner)]
                entry[1] -= 1
                if entry[1] == 0:
                    owner.generation_config = entry[0]
                    del _swapped[id(owner)]
