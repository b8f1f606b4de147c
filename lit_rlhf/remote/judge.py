"""LLMJudge: a generative model scores each completion with a prompt template (pointwise, e.g. 0-10).

The judge is either an OpenAI-compatible endpoint (`base_url`, e.g. `vllm serve`, through the official `openai`
client) or a local Hugging Face causal LM (`model` a path or hub name, greedy decoding). Its judgement is untrusted
text and the parser is strict: the judgement's first non-empty line must be a number in [min_score, max_score],
optionally written `Score: 7` or `7/10`. Anything else is unparsable: scored `unparsable_score` (min_score when
null) and counted (rewards/llm_judge/unparsable, per RL step).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.remote.schema import RewardServiceError, shown

DEFAULT_TEMPLATE = (
    "Rate how good the response is as a continuation of the prompt, from {min_score} (bad) to {max_score} "
    "(excellent). Answer with the number only.\n\nPrompt: {prompt}\nResponse: {completion}\n\nScore:"
)
JUDGEMENT = re.compile(r"^(?:score\s*[:=]?\s*)?([-+]?\d+(?:\.\d+)?)(?:\s*/\s*\d+(?:\.\d+)?)?\s*\.?$", re.I)


def parse_judgement(text: str, min_score: float, max_score: float) -> float | None:
    """The score a judgement states, or None when it states none (strictly: see the module's docstring)."""
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    found = JUDGEMENT.match(line)
    if found is None:
        return None
    score = float(found.group(1))
    return score if min_score <= score <= max_score else None


class LLMJudge:
    """A pointwise LLM judge as a reward: template.format(prompt=, completion=, min_score=, max_score=) -> a
    judgement -> a score. base_url: an OpenAI-compatible endpoint serving `model`; without it, `model` is a local
    Hugging Face causal LM."""

    def __init__(self, model: str, base_url: str | None = None, template: str = DEFAULT_TEMPLATE,
                 min_score: float = 0.0, max_score: float = 10.0, unparsable_score: float | None = None,
                 max_tokens: int = 8, api_key_env: str | None = None, timeout_s: float = 60.0, retries: int = 3,
                 max_concurrency: int = 8, batch_size: int = 8, device: str | None = None):
        if not min_score < max_score:
            raise ConfigError(f"reward.min_score={min_score} must be below reward.max_score={max_score}.")
        missing = sorted({"prompt", "completion"} - set(re.findall(r"{(\w+)}", template)))
        if missing:
            raise ConfigError(f"reward.template has no {{{missing[0]}}}; a judge template shows the judge "
                              f"{{prompt}} and {{completion}}.")
        if base_url is not None and not str(base_url).startswith(("http://", "https://")):
            raise ConfigError(f"reward.base_url={base_url!r} is not an http(s) URL; give the endpoint's address with "
                              f"its /v1, e.g. http://127.0.0.1:8000/v1, or null for a local model.")
        self.__name__ = "llm_judge"
        self.model, self.base_url, self.template = model, base_url, template
        self.min_score, self.max_score = float(min_score), float(max_score)
        self.unparsable_score = self.min_score if unparsable_score is None else float(unparsable_score)
        self.max_tokens, self.timeout_s, self.retries = max_tokens, float(timeout_s), retries
        self.max_concurrency, self.batch_size, self.device = max_concurrency, batch_size, device
        self.api_key_env = api_key_env
        if api_key_env and not os.environ.get(api_key_env):
            raise ConfigError(f"reward.api_key_env={api_key_env!r} names an environment variable that is not set; "
                              f"export {api_key_env}=<the endpoint's key> before the run.")
        self.waits = base_url is not None  # an endpoint: scored while the step's forwards run
        self.unparsable = 0  # judgements without a score since the module last read them
        self._client = self._local = None

    def load(self) -> None:
        """Before training: a local judge model loads, an endpoint is asked for its models (GET /models), so a bad
        path or an endpoint that is down fails before the first step."""
        if self.base_url is None and self._local is None:
            from lit_rlhf.remote.local_judge import LocalJudgeModel

            self._local = LocalJudgeModel(self.model, self.max_tokens, self.batch_size, self.device)
        elif self.base_url is not None and self._client is None:
            self.endpoint_call(lambda client: client.models.list())

    def client(self):
        import openai

        if self._client is None:
            key = os.environ.get(self.api_key_env) if self.api_key_env else None
            self._client = openai.OpenAI(base_url=self.base_url, api_key=key or "not-needed", timeout=self.timeout_s,
                                         max_retries=self.retries)
        return self._client

    def endpoint_call(self, call):
        """call(the openai client), its errors as one line naming the endpoint."""
        import openai

        try:
            return call(self.client())
        except openai.APIStatusError as err:
            raise RewardServiceError(f"the judge endpoint {self.base_url} refused the request with HTTP "
                                     f"{err.status_code}: {shown(err.message)}; check reward.model and the key in "
                                     f"reward.api_key_env.") from None
        except openai.APIError as err:
            raise RewardServiceError(f"the judge endpoint {self.base_url}: {type(err).__name__} after "
                                     f"{self.retries + 1} attempts; check that it is up, then resume from the last "
                                     f"checkpoint.") from None

    def __call__(self, prompts: Sequence[str], completions: Sequence[str]) -> torch.Tensor:
        bounds = {"min_score": f"{self.min_score:g}", "max_score": f"{self.max_score:g}"}
        texts = [self.template.format(prompt=p, completion=c, **bounds)
                 for p, c in zip(prompts, completions, strict=True)]
        judgements = self.judge_remote(texts) if self.base_url is not None else self.judge_local(texts)
        scores = [parse_judgement(j, self.min_score, self.max_score) for j in judgements]
        self.unparsable += sum(s is None for s in scores)
        return torch.tensor([self.unparsable_score if s is None else s for s in scores], dtype=torch.float32)

    def pop_stats(self) -> dict[str, float]:
        """What the module logs beside the scores (rewards/llm_judge/unparsable), since the last call."""
        stats, self.unparsable = {"unparsable": float(self.unparsable)}, 0
        return stats

    def judge_local(self, texts: list[str]) -> list[str]:
        self.load()
        return self._local.generate(texts)

    def judge_remote(self, texts: list[str]) -> list[str]:
        def one(text: str) -> str:
            reply = self.endpoint_call(lambda client: client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": text}], temperature=0.0,
                max_tokens=self.max_tokens))
            choices = getattr(reply, "choices", None) or []
            return (choices[0].message.content or "") if choices else ""

        with ThreadPoolExecutor(max(1, min(self.max_concurrency, len(texts)))) as pool:
            return list(pool.map(one, texts))

    def __getstate__(self) -> dict[str, Any]:  # ddp_spawn pickles the module: clients are made anew
        return {**self.__dict__, "_client": None}
