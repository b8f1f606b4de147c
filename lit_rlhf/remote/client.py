"""HTTPReward: scores from a reward server (python -m lit_rlhf.serve, or any server of the schema in
lit_rlhf.remote.schema), over HTTP with httpx.

A batch of N completions goes out as requests of at most `batch_size`, `max_concurrency` at a time. A request that
fails to connect, times out or gets a 5xx answer is retried `retries` times, after backoff_s, 2*backoff_s, ...;
then the run stops with one line (its checkpoints are complete). A 4xx answer is not retried.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.remote.schema import RewardServiceError, parse_scores, shown
from lit_rlhf.terminal import without_passwords

RETRIED_STATUS = range(500, 600)


class HTTPReward:
    """A reward computed by a server at `url`: POST {url}/score with the prompts, completions and the dataset
    columns the server's /health names; one finite score per completion back.

    auth_env names an environment variable holding a token sent as `Authorization: Bearer <token>` (the token is
    never part of the config, the logs or an error message). overlap=True lets the module score while its
    reference and old-logprob forwards run (the reward waits on the network, not on this process)."""

    def __init__(self, url: str, batch_size: int = 64, max_concurrency: int = 4, timeout_s: float = 30.0,
                 retries: int = 3, backoff_s: float = 0.5, auth_env: str | None = None, overlap: bool = True):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"reward.url={without_passwords(str(url))!r} is not an http(s) URL; give the reward "
                              f"server's address, e.g. "
                              f"reward.url=http://127.0.0.1:8000 (python -m lit_rlhf.serve reward=vader starts one).")
        for key, value, minimum in (("batch_size", batch_size, 1), ("max_concurrency", max_concurrency, 1),
                                    ("retries", retries, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ConfigError(f"reward.{key}={value!r} must be a whole number >= {minimum}.")
        for key, value in (("timeout_s", timeout_s), ("backoff_s", backoff_s)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or \
                    value < 0 or (key == "timeout_s" and value == 0):
                raise ConfigError(f"reward.{key}={value!r} must be a finite number of seconds > 0.")
        self.auth_env = auth_env
        auth_headers(auth_env)  # a variable that is not set fails now
        self.__name__ = "http"  # logged as rewards/http/*
        self.url = url.rstrip("/")
        self.shown_url = without_passwords(self.url)  # what messages show: never a password in the URL
        self.batch_size, self.max_concurrency, self.timeout_s = batch_size, max_concurrency, float(timeout_s)
        self.retries, self.backoff_s, self.waits = retries, float(backoff_s), bool(overlap)
        self.client = self.new_client()
        self.server: dict[str, Any] | None = None

    def load(self) -> None:
        """Asks the server's /health (once): a server that is not up stops the run here, before any training."""
        if self.server is None:
            body = self.request("GET", "/health", None, f"the reward server {self.shown_url}")
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
        starts = list(range(0, len(completions), self.batch_size))

        def score(number: int, start: int) -> list[float]:
            end = start + self.batch_size
            where = (f"the reward server {self.shown_url} (batch {number + 1} of {len(starts)}, completions "
                     f"{start}-{min(end, len(completions)) - 1})")
            payload = {"prompts": list(prompts[start:end]), "completions": list(completions[start:end]),
                       "columns": {name: values[start:end] for name, values in sent.items()}}
            return parse_scores(self.request("POST", "/score", payload, where), len(payload["completions"]), where)

        if len(starts) <= 1 or self.max_concurrency == 1:
            parts = [score(n, s) for n, s in enumerate(starts)]
        else:
            with ThreadPoolExecutor(min(self.max_concurrency, len(starts))) as pool:
                parts = list(pool.map(score, range(len(starts)), starts))
        return torch.tensor([s for part in parts for s in part], dtype=torch.float32)

    def request(self, method: str, path: str, payload: Any, where: str) -> Any:
        """The JSON answer of one request, retried on connection errors, timeouts and 5xx with exponential
        backoff; RewardServiceError (one line naming `where`) when it cannot be had."""
        import httpx

        failure = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = self.send_within_timeout(method, path, payload)
            except httpx.TimeoutException:
                failure = f"no answer within reward.timeout_s={self.timeout_s:g} s"
                continue
            except httpx.TransportError as err:
                failure = f"cannot connect ({type(err).__name__})"
                continue
            if response.status_code in RETRIED_STATUS:
                failure = f"HTTP {response.status_code}: {shown(response.text)}"
                continue
            if response.status_code >= 400:
                hint = (f"; check the token in ${self.auth_env}" if self.auth_env and response.status_code in (401, 403)
                        else "")
                raise RewardServiceError(f"{where} refused {method} {path} with HTTP {response.status_code}: "
                                         f"{shown(response.text)}{hint}.")
            try:
                return response.json()
            except ValueError:
                raise RewardServiceError(f"{where} answered {shown(response.text)}, which is not JSON; a reward "
                                         f"server answers JSON (docs/rewards.md).") from None
        tries = f"{self.retries + 1} attempt{'s' if self.retries else ''}"
        raise RewardServiceError(f"{where}: {failure} after {tries}; check that the server is up "
                                 f"({self.shown_url}/health).")

    def send_within_timeout(self, method: str, path: str, payload: Any):
        """The response to one request, read whole within timeout_s from its start (httpx's timeouts bound each
        read, so a server trickling a byte at a time would hold the run for ever): past the deadline the response is
        closed and httpx.ReadTimeout raised."""
        import httpx

        deadline = time.monotonic() + self.timeout_s
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def send() -> None:
            try:
                with self.client.stream(method, path, json=payload) as response:
                    outcome["response"] = response
                    response.read()
            except BaseException as err:  # handed to the caller
                outcome["error"] = err
            finally:
                done.set()

        threading.Thread(target=send, daemon=True, name="lit_rlhf-http").start()
        if not done.wait(max(0.0, deadline - time.monotonic())):
            if "response" in outcome:
                outcome["response"].close()  # ends the trickle: the sender's read fails and its thread ends
            raise httpx.ReadTimeout(f"no complete answer within {self.timeout_s:g} s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["response"]

    def new_client(self):
        import httpx

        return httpx.Client(base_url=self.url, headers=auth_headers(self.auth_env), timeout=self.timeout_s)

    def close(self) -> None:
        self.client.close()

    def __getstate__(self) -> dict[str, Any]:  # ddp_spawn pickles the module: the client is made anew
        state = dict(self.__dict__)
        state["client"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.client = self.new_client()


def auth_headers(auth_env: str | None) -> dict[str, str]:
    """{"Authorization": "Bearer <token>"} from the environment variable auth_env names; {} without one."""
    if not auth_env:
        return {}
    token = os.environ.get(auth_env)
    if not token:
        raise ConfigError(f"reward.auth_env={auth_env!r} names an environment variable that is not set; export "
                          f"{auth_env}=<the server's token> before the run.")
    return {"Authorization": f"Bearer {token}"}
