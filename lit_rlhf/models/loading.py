"""from_pretrained with one clear line, within seconds, when a model is not available (e.g. offline)."""

from __future__ import annotations

import os
import pickle
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

import torch

from lit_rlhf.errors import ConfigError, UnavailableError

T = TypeVar("T")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def resolve_dtype(dtype: str | torch.dtype | None):
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ConfigError(f"dtype={dtype!r} is not one of {sorted(DTYPES)}; set model.dtype to one of those.")
    return DTYPES[dtype]


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def hub_endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def hub_reachable(timeout: float = 3.0) -> bool:
    """A TCP connection to the Hub's host opens within timeout. With a proxy configured the direct probe
    means nothing, so the Hub counts as reachable and the download itself decides."""
    if any(os.environ.get(name) for name in PROXY_VARIABLES):
        return True
    url = urlparse(hub_endpoint())
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
        return True
    except OSError:
        return False


def unavailable(what: str, name_or_path: str, reason: str, key: str) -> UnavailableError:
    return UnavailableError(
        f"{what} {name_or_path!r} is not available here ({reason}). Download it on a machine with internet "
        f"(`hf download {name_or_path}`) into the Hugging Face cache (then HF_HUB_OFFLINE=1 uses only the cache), "
        f"or point {key} at a local directory."
    )


def from_pretrained(loader: Callable[..., T], name_or_path: str, what: str = "model", cache_first: bool = True,
                    errors: tuple[type[BaseException], ...] = (OSError,), key: str = "name_or_path", **kwargs) -> T:
    """`loader(name_or_path, **kwargs)`, turning 'not found / no connection' into UnavailableError.

    A hub name is looked up in the local cache first; when it is not there and the Hub cannot be reached,
    the error comes at once instead of after the Hub client's retries."""
    remote = not Path(str(name_or_path)).exists() and not hub_offline()
    if remote and cache_first:
        try:
            return loader(name_or_path, local_files_only=True, **kwargs)
        except OSError:
            pass
        if not hub_reachable():
            raise unavailable(what, name_or_path, f"not in the cache, and {hub_endpoint()} cannot be reached", key)
    try:
        return loader(name_or_path, **kwargs)
    except pickle.UnpicklingError as err:  # torch.load(weights_only=True) refused a pickle that asks for code
        found = re.search(r"GLOBAL (\S+)", str(err))
        asks = f" (it references {found.group(1)})" if found else ""
        raise ConfigError(f"{key}={str(name_or_path)!r} holds a pickled weights file (.bin) that is not plain "
                          f"tensors{asks}; it was refused without running it. Use weights saved as "
                          f"safetensors.") from err
    except errors as err:  # transformers and huggingface_hub raise OSError subclasses for both cases
        raise unavailable(what, name_or_path, type(err).__name__, key) from err
