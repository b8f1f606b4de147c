"""HTTPReward: scores from a reward server (python -m lit_rlhf.serve, or any server of the schema in
lit_rlhf.remote.schema), over HTTP with httpx.

Batching, concurrency, timeouts, retries and auth are HTTPService's (lit_rlhf.remote.http).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from lit_rlhf.config.validation import check_flag
from lit_rlhf.remote.http import HTTPService
from lit_rlhf.remote.schema import RewardServiceError, parse_scores, shown


class HTTPReward(HTTPService):
    """A reward computed by a server at `url`: POST {url}/score with the prompts, completions and the dataset
    columns the server's /health names; one finite score per completion back.

    auth_env names an environment variable holding a token sent as `Authorization: Bearer <token>` (the token is
    never part of the config, the logs or an error message). overlap=True lets the module score while its
    reference and old-logprob forwards run (the reward waits on the network, not on this process)."""

    key, error = "reward", RewardServiceError
    url_example = "http://127.0.0.1:8000 (python -m lit_rlhf.serve reward=vader starts one)"

    def __init__(self, url: str, batch_size: int = 64, max_concurrency: int = 4, timeout_s: float = 30.0,
                 retries: int = 3, backoff_s: float = 0.5, auth_env: str | None = None, overlap: bool = True):
        check_flag("reward.overlap", overlap)
        super().__init__(url, batch_size, max_concurrency, timeout_s, retries, backoff_s, auth_env)
        self.__name__ = "http"  # logged as rewards/http/*
        self.waits = bool(overlap)
        self.server: dict[str, Any] | None = None

    def load(self) -> None:
        """Asks the server's /health (once): a server that is not up stops the run here, before any training."""
        if self.server is None:
            body = self.request("GET", "/health", None, f"{self.server_name} {self.shown_url}")
            columns = body.get("columns", []) if isinstance(body, dict) else None
            if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
                raise RewardServiceError(f"the reward server {self.shown_url} answered /health with {shown(body)}; a "
                                         f"reward server answers {{\"status\": \"ok\", \"columns\": [...]}}.")
            self.server = body

    @property
    def required_columns(self) -> list[str]:
        """The dataset columns the server's reward reads (its /health)."""
        self.load()
        return list(self.server["columns"])

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> torch.Tensor:
        sent = {name: list(columns[name]) for name in self.required_columns if name in columns}

        def score(where: str, start: int, end: int) -> list[float]:
            payload = {"prompts": list(prompts[start:end]), "completions": list(completions[start:end]),
                       "columns": {name: values[start:end] for name, values in sent.items()}}
            return parse_scores(self.request("POST", "/score", payload, where), end - start, where)

        return torch.tensor(self.in_batches(len(completions), score, "completions"), dtype=torch.float32)
