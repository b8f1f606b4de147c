"""from_pretrained with one clear line when a model is not available (e.g. offline)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

from lit_rlhf.errors import ConfigError, UnavailableError

T = TypeVar("T")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}


def resolve_dtype(dtype: str | torch.dtype | None):
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ConfigError(f"dtype={dtype!r} is not one of {sorted(DTYPES)}; set model.dtype to one of those.")
    return DTYPES[dtype]


def from_pretrained(loader: Callable[..., T], name_or_path: str, what: str = "model", **kwargs) -> T:
    """`loader(name_or_path, **kwargs)`, turning 'not found / no connection' into UnavailableError."""
    try:
        return loader(name_or_path, **kwargs)
    except OSError as err:  # transformers and huggingface_hub raise OSError subclasses for both cases
        raise UnavailableError(
            f"{what} {name_or_path!r} is not available here ({type(err).__name__}). Download it on a machine "
            f"with internet (`hf download {name_or_path}`) into the Hugging Face cache, or point "
            f"name_or_path at a local directory."
        ) from err
