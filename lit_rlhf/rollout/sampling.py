"""Pure sampling for rollouts: temperature only, unless the user explicitly opts into bias."""

from __future__ import annotations

from typing import Any

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
