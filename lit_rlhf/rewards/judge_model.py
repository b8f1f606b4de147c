"""JudgeModel: a generative model writing judgements for LLM judges, either an OpenAI-compatible endpoint (`base_url`,
e.g. `vllm serve`, through the official `openai` client) or a local Hugging Face causal LM (greedy decoding)."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lit_rlhf.errors import ConfigError, UnavailableError
from lit_rlhf.remote.http import auth_token
from lit_rlhf.remote.schema import RewardServiceError, shown


class JudgeModel:
    """judgements(texts) -> one text per prompt. `key` is the config prefix errors name (reward, judge)."""

    def __init__(self, model: str, base_url: str | None = None, max_tokens: int = 8, api_key_env: str | None = None,
                 timeout_s: float = 60.0, retries: int = 3, max_concurrency: int = 8, batch_size: int = 8,
                 device: str | None = None, key: str = "reward"):
        if base_url is not None and not str(base_url).startswith(("http://", "https://")):
            raise ConfigError(f"{key}.base_url={base_url!r} is not an http(s) URL; give the endpoint's address with "
                              f"its /v1, e.g. http://127.0.0.1:8000/v1, or null for a local model.")
        auth_token(f"{key}.api_key_env", api_key_env, "<the endpoint's key> before the run")
        for name, value, minimum in (("max_tokens", max_tokens, 1), ("retries", retries, 0),
                                     ("max_concurrency", max_concurrency, 1), ("batch_size", batch_size, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ConfigError(f"{key}.{name}={value!r} must be a whole number >= {minimum}.")
        if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or not 0 < timeout_s < math.inf:
            raise ConfigError(f"{key}.timeout_s={timeout_s!r} must be a finite number of seconds > 0.")
        self.model, self.base_url, self.key = model, base_url, key
        self.max_tokens, self.timeout_s, self.retries = max_tokens, float(timeout_s), retries
        self.max_concurrency, self.batch_size, self.device = max_concurrency, batch_size, device
        self.api_key_env = api_key_env
        self.waits = base_url is not None  # an endpoint: scored while the step's forwards run
        self._client = self._local = None

    def load(self) -> None:
        """Before training: a local judge model loads, an endpoint is asked for its models (GET /models), so a bad
        path or an endpoint that is down fails before the first step."""
        if self.base_url is None and self._local is None:
            from lit_rlhf.rewards.local_judge import LocalJudgeModel

            self._local = LocalJudgeModel(self.model, self.max_tokens, self.batch_size, self.device, self.key)
        elif self.base_url is not None and self._client is None:
            self.endpoint_call(lambda client: client.models.list())

    def judgements(self, texts: list[str]) -> list[str]:
        if self.base_url is None:
            self.load()
            return self._local.generate(texts)

        def one(text: str) -> str:
            reply = self.endpoint_call(lambda client: client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": text}], temperature=0.0,
                max_tokens=self.max_tokens))
            choices = getattr(reply, "choices", None) or []
            if not choices:
                return ""
            message = getattr(choices[0], "message", None)
            if message is None:
                raise RewardServiceError(f"the judge endpoint {self.base_url} answered without a message "
                                         f"(choices[0].message); an OpenAI-compatible chat endpoint answers "
                                         f"{{\"choices\": [{{\"message\": {{\"content\": ...}}}}]}}.")
            content = getattr(message, "content", None)
            return content if isinstance(content, str) else ""

        with ThreadPoolExecutor(max(1, min(self.max_concurrency, len(texts)))) as pool:
            return list(pool.map(one, texts))

    def client(self):
        try:
            import openai
        except ImportError:
            raise UnavailableError(f"{self.key}.base_url needs the openai client, which is not installed; "
                                   f"pip install -e \".[judge]\" (or pip install openai).") from None

        if self._client is None:
            key = auth_token(f"{self.key}.api_key_env", self.api_key_env)
            self._client = openai.OpenAI(base_url=self.base_url, api_key=key or "not-needed", timeout=self.timeout_s,
                                         max_retries=self.retries)
        return self._client

    def endpoint_call(self, call):
        """call(the openai client), its errors as one line naming the endpoint."""
        client = self.client()
        import openai

        try:
            return call(client)
        except openai.APIStatusError as err:
            raise RewardServiceError(f"the judge endpoint {self.base_url} refused the request with HTTP "
                                     f"{err.status_code}: {shown(err.message)}; check {self.key}.model and the key "
                                     f"in {self.key}.api_key_env.") from None
        except openai.APIError as err:
            tries = f"{self.retries + 1} attempt{'s' if self.retries else ''}"
            raise RewardServiceError(f"the judge endpoint {self.base_url}: {type(err).__name__} after {tries}; check "
                                     f"that it is up.") from None

    def __getstate__(self) -> dict[str, Any]:  # ddp_spawn pickles the module: clients are made anew
        return {**self.__dict__, "_client": None}
