"""HTTPService: the transport every client of a server shares (a reward server, a served teacher), so each has the
same rules: requests of at most `batch_size`, `max_concurrency` at a time; a request that fails to connect, times out
(timeout_s bounds the whole answer) or gets a 5xx answer is retried `retries` times after backoff_s, 2*backoff_s,
...; a 4xx answer is not retried; a token from the environment variable `auth_env`, never from the config; every
failure one line naming the server (its checkpoints are complete when a run stops on it)."""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from lit_rlhf.errors import ConfigError, UnavailableError, empty_value_line
from lit_rlhf.interrupts import thread_pool
from lit_rlhf.remote.schema import shown
from lit_rlhf.terminal import VARIABLE_NAME, without_passwords

RETRIED_STATUS = range(500, 600)
SERVED_TOKEN = "<a token> (clients send it with reward.auth_env)"  # the reward server's own auth_env


class HTTPService:
    """A JSON-over-HTTP client of the server at `url`. key: the config group errors name (reward, teacher);
    error: the exception its failures raise; health_path: where a user checks that the server is up."""

    key, server_name = "reward", "the reward server"
    error: type[UnavailableError] = UnavailableError
    health_path = "/health"
    docs_page = "rewards.md"
    url_setting, url_example = "url", "http://127.0.0.1:8000"  # the setting that gives the address, in messages

    def __init__(self, url: str, batch_size: int = 64, max_concurrency: int = 4, timeout_s: float = 30.0,
                 retries: int = 3, backoff_s: float = 0.5, auth_env: str | None = None):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            setting = f"{self.key}.{self.url_setting}"
            raise ConfigError(f"{setting}={without_passwords(str(url))!r} is not an http(s) URL; give the server's "
                              f"address, e.g. {setting}={self.url_example}.")
        for name, value, minimum in (("batch_size", batch_size, 1), ("max_concurrency", max_concurrency, 1),
                                     ("retries", retries, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ConfigError(f"{self.key}.{name}={value!r} must be a whole number >= {minimum}.")
        for name, value in (("timeout_s", timeout_s), ("backoff_s", backoff_s)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or \
                    value < 0 or (name == "timeout_s" and value == 0):
                raise ConfigError(f"{self.key}.{name}={value!r} must be a finite number of seconds > 0.")
        self.auth_env = auth_env
        auth_headers(auth_env, self.key)  # a variable that is not set fails now
        self.url = url.rstrip("/")
        self.shown_url = without_passwords(self.url)  # what messages show: never a password in the URL
        self.batch_size, self.max_concurrency, self.timeout_s = batch_size, max_concurrency, float(timeout_s)
        self.retries, self.backoff_s = retries, float(backoff_s)
        self.client = self.new_client()

    def pick_served_model(self, model: str | None) -> str:
        """The name of the model to ask an OpenAI-compatible server for: `model` if the server's /v1/models lists
        it (else a one-line error naming the setting), or the first it lists (model None)."""
        where = f"{self.server_name} {self.shown_url}"
        body = self.request("GET", "/v1/models", None, where)
        data = body.get("data") if isinstance(body, dict) else None
        served = [m.get("id") for m in data if isinstance(m, dict)] if isinstance(data, list) else None
        if not served:
            raise self.error(f"{where} answered /v1/models with {shown(body)}; an OpenAI-compatible server lists "
                             f"the models it serves: {{\"data\": [{{\"id\": ...}}]}}.")
        if model is not None and model not in served:
            raise ConfigError(f"{self.key}.model={model!r} is not served by {self.shown_url} (it serves "
                              f"{shown(served)}); set {self.key}.model to one of them.")
        return model if model is not None else str(served[0])

    def in_batches(self, n: int, answer: Callable[[str, int, int], list], items: str) -> list:
        """answer(where, start, end) for each batch [start, end) of at most batch_size of the n `items`, max_concurrency
        at a time; the answers concatenated in order. `where` names the server and the batch for error lines."""
        starts = list(range(0, n, self.batch_size))

        def one(number: int, start: int) -> list:
            end = min(start + self.batch_size, n)
            where = (f"{self.server_name} {self.shown_url} (batch {number + 1} of {len(starts)}, {items} "
                     f"{start}-{end - 1})")
            return answer(where, start, end)

        if len(starts) <= 1 or self.max_concurrency == 1:
            parts = [one(number, start) for number, start in enumerate(starts)]
        else:
            # an interrupt leaves without joining the requests in flight (they end with their timeouts)
            with thread_pool(min(self.max_concurrency, len(starts)), "http") as pool:
                parts = list(pool.map(one, range(len(starts)), starts))
        return [item for part in parts for item in part]

    def request(self, method: str, path: str, payload: Any, where: str, missing_ok: bool = False,
                text: bool = False) -> Any:
        """The JSON answer of one request (text: its text, for a route that answers plain text), retried on
        connection errors, timeouts and 5xx with exponential backoff; self.error (one line naming `where`) when it
        cannot be had. missing_ok: None for a 404 (a route the server does not have)."""
        import httpx

        failure = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = self.send_within_timeout(method, path, payload)
            except httpx.TimeoutException:
                failure = f"no answer within {self.key}.timeout_s={self.timeout_s:g} s"
                continue
            except httpx.TransportError as err:
                failure = f"cannot connect ({type(err).__name__})"
                continue
            if response.status_code in RETRIED_STATUS:
                failure = f"HTTP {response.status_code}: {shown(response.text)}"
                continue
            if missing_ok and response.status_code in (404, 405):
                return None
            if response.status_code >= 400:
                hint = (f"; check the token in ${self.auth_env}" if self.auth_env and response.status_code in (401, 403)
                        else "")
                raise self.error(f"{where} refused {method} {path} with HTTP {response.status_code}: "
                                 f"{shown(response.text)}{hint}.")
            if text:
                return response.text
            try:
                return response.json()
            except ValueError:
                raise self.error(f"{where} answered {shown(response.text)}, which is not JSON; a {self.key} "
                                 f"server answers JSON (docs/{self.docs_page}).") from None
        tries = f"{self.retries + 1} attempt{'s' if self.retries else ''}"
        raise self.error(f"{where}: {failure} after {tries}; check that the server is up "
                         f"({self.shown_url}{self.health_path}).")

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

        return httpx.Client(base_url=self.url, headers=auth_headers(self.auth_env, self.key), timeout=self.timeout_s)

    def close(self) -> None:
        self.client.close()

    def __getstate__(self) -> dict[str, Any]:  # ddp_spawn pickles the module: the client is made anew
        state = dict(self.__dict__)
        state["client"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.client = self.new_client()


def auth_token(setting: str, auth_env: object, export_as: str = "<the server's token> before the run") -> str | None:
    """The token in the environment variable that auth_env names (None without auth_env). A value that is no
    variable name is not echoed: it may be the token itself, typed in its variable's place. export_as: what the
    line for a variable that is not set shows after `export NAME=`."""
    if auth_env is None:
        return None
    if auth_env == "":
        raise ConfigError(empty_value_line(f"{setting}=''", f"give the name of the environment variable holding the "
                                                            f"token, or leave {setting} out (no token)"))
    if not isinstance(auth_env, str):
        raise ConfigError(f"{setting}={auth_env!r} must name the environment variable that holds the token (e.g. "
                          f"{setting}=MY_TOKEN; null: no token).")
    if not VARIABLE_NAME.fullmatch(auth_env):
        raise ConfigError(f"{setting} must name the environment variable that holds the token (e.g. "
                          f"{setting}=MY_TOKEN), not the token itself; the value given is no variable name (not "
                          f"shown here).")
    token = os.environ.get(auth_env)
    if not token:
        raise ConfigError(f"{setting}={auth_env!r} names an environment variable that is not set; export "
                          f"{auth_env}={export_as}.")
    return token


def auth_headers(auth_env: str | None, key: str = "reward") -> dict[str, str]:
    """{"Authorization": "Bearer <token>"} from the environment variable auth_env names; {} without one."""
    token = auth_token(f"{key}.auth_env", auth_env)
    return {} if token is None else {"Authorization": f"Bearer {token}"}
