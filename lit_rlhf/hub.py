"""Whether the Hugging Face Hub (or another server: W&B's) can be asked: offline mode, its endpoint, a quick
connection probe. Light (no torch): the model loaders, the data sources and the W&B logger ask before a request
whose client would retry for half a minute or more to say that the server cannot be reached."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def hub_endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def hub_reachable(timeout: float = 3.0) -> bool:
    return reachable(hub_endpoint(), timeout)


def reachable(endpoint: str, timeout: float = 3.0) -> bool:
    """A TCP connection to the endpoint's host opens within timeout. With a proxy configured the direct probe
    means nothing, so the endpoint counts as reachable and the request itself decides."""
    if any(os.environ.get(name) for name in PROXY_VARIABLES):
        return True
    url = urlparse(endpoint)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
        return True
    except OSError:
        return False
