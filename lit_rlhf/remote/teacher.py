"""ServedTeacher: an on-policy distillation teacher behind an OpenAI-compatible completions server (`vllm serve
<teacher>`), which scores the student's token ids as the prompt of a request that generates nothing:

    POST {url}/v1/completions  {"model": m, "prompt": [[token ids]], "max_tokens": 0, "echo": true, "logprobs": 0}
    -> {"choices": [{"index": i, "logprobs": {"token_logprobs": [null, float, ...]}}]}

token_logprobs holds the logprob of each given token after the ones before it (the first has none), so a server that
returns only the top-k alternatives still gives every sampled token's own logprob. Requests, timeouts, retries and
auth follow HTTPService's rules (lit_rlhf.remote.http), as reward=http's do.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn

from lit_rlhf.errors import ConfigError, UnavailableError
from lit_rlhf.remote.http import HTTPService
from lit_rlhf.remote.schema import shown

VOCABULARY_PROBE = " The quick brown fox: 12 + 34 = 46.\n\t{\"a\": [1, 2]} ünïcode 日本"


class TeacherServiceError(UnavailableError):
    """A teacher server that cannot be reached, or whose answer is not one logprob per token."""


class ServedTeacher(HTTPService):
    """A teacher served at `url` (the server's root, e.g. http://127.0.0.1:8000; a trailing /v1 is dropped).
    model: the served model's name (null: the first the server lists). At most batch_size sequences per request,
    max_concurrency requests at a time; timeout_s, retries, backoff_s and auth_env as reward=http's."""

    key, server_name, error = "teacher", "the teacher server", TeacherServiceError
    health_path, docs_page = "/v1/models", "distillation.md"
    url_example = "http://127.0.0.1:8000 (vllm serve <teacher> starts one)"

    def __init__(self, url: str, model: str | None = None, batch_size: int = 16, max_concurrency: int = 4,
                 timeout_s: float = 60.0, retries: int = 3, backoff_s: float = 0.5, auth_env: str | None = None):
        url = url.rstrip("/").removesuffix("/v1") if isinstance(url, str) else url
        super().__init__(url, batch_size, max_concurrency, timeout_s, retries, backoff_s, auth_env)
        self.model = model
        self.served_model: str | None = None

    def load(self, tokenizer: Any) -> None:
        """Before training: the server is up, serves the model, and reads token ids as the student's tokenizer
        writes them (checked on its /tokenize where it has one)."""
        if self.served_model is not None:
            return
        where = f"{self.server_name} {self.shown_url}"
        body = self.request("GET", "/v1/models", None, where)
        data = body.get("data") if isinstance(body, dict) else None
        served = [m.get("id") for m in data if isinstance(m, dict)] if isinstance(data, list) else None
        if not served:
            raise self.error(f"{where} answered /v1/models with {shown(body)}; an OpenAI-compatible server lists "
                             f"the models it serves: {{\"data\": [{{\"id\": ...}}]}}.")
        if self.model is not None and self.model not in served:
            raise ConfigError(f"teacher.model={self.model!r} is not served by {self.shown_url} (it serves "
                              f"{shown(served)}); set teacher.model to one of them.")
        self.served_model = self.model if self.model is not None else str(served[0])
        self.check_vocabulary(tokenizer, where)

    def check_vocabulary(self, tokenizer: Any, where: str) -> None:
        """The server tokenizes a probe (the student's special tokens and mixed text) into the student's ids. The
        pad token is left out: lit_rlhf adds one to a tokenizer without (never sampled, never scored)."""
        specials = [token for token in tokenizer.all_special_tokens if token != tokenizer.pad_token]
        probe = "".join(specials) + VOCABULARY_PROBE
        body = self.request("POST", "/tokenize", {"model": self.served_model, "prompt": probe,
                                                  "add_special_tokens": False}, where, missing_ok=True)
        if body is None:
            rank_zero_warn(f"{where} has no /tokenize, so its tokenizer is not checked against the student's; a "
                           f"teacher of another model family would score the wrong tokens.")
            return
        theirs = body.get("tokens") if isinstance(body, dict) else None
        ours = tokenizer(probe, add_special_tokens=False)["input_ids"]
        if theirs != ours:
            theirs = theirs if isinstance(theirs, list) else []
            at = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
                      min(len(ours), len(theirs)))
            raise ConfigError(f"teacher.url={self.shown_url} serves {self.served_model!r} with another tokenizer than "
                              f"the student's (a probe text is {len(theirs)} tokens there and {len(ours)} here, "
                              f"first different at token {at}); a teacher scores the student's token ids, so serve "
                              f"a model of the student's family.")

    @staticmethod
    def check_temperature(temperature: float) -> None:
        """A server's prompt logprobs are its model's own: the student must sample at temperature 1."""
        if temperature != 1.0:
            raise ConfigError(f"teacher=served gives logprobs at temperature 1 (a server's prompt logprobs are its "
                              f"model's own) and algo.temperature={temperature:g}; sample at algo.temperature=1 or "
                              f"load the teacher (teacher=causal_lm).")

    def logprobs(self, queries: torch.Tensor, query_mask: torch.Tensor, responses: torch.Tensor,
                 response_mask: torch.Tensor, temperature: float, columns: dict[str, list] | None = None
                 ) -> torch.Tensor:
        """log p_teacher of each response token given what precedes it. -> (N,R), zero outside response_mask"""
        self.check_temperature(temperature)
        if self.served_model is None:
            raise ConfigError("the teacher was not loaded: a module loads it with the student (Sampler.attach).")
        lengths = [int(row.nonzero().max()) + 1 if row.any() else 0 for row in response_mask.cpu()]  # N
        rows = [i for i, length in enumerate(lengths) if length]
        prompts = [queries[i][query_mask[i].bool()].tolist() for i in rows]
        scored = [responses[i, :lengths[i]].tolist() for i in rows]

        def answer(where: str, start: int, end: int) -> list[list[float]]:
            payload = {"model": self.served_model,
                       "prompt": [p + s for p, s in zip(prompts[start:end], scored[start:end], strict=True)],
                       "max_tokens": 0, "echo": True, "logprobs": 0, "temperature": 1.0}
            body = self.request("POST", "/v1/completions", payload, where)
            return parse_token_logprobs(body, prompts[start:end], scored[start:end], where)

        out = torch.zeros(responses.shape, dtype=torch.float32)  # N,R
        for i, values in zip(rows, self.in_batches(len(rows), answer, "sequences"), strict=True):
            out[i, :len(values)] = torch.tensor(values, dtype=torch.float32)
        return out.to(responses.device) * response_mask


def parse_token_logprobs(body: Any, prompts: list[list[int]], scored: list[list[int]], where: str
                         ) -> list[list[float]]:
    """Each sequence's logprobs of its `scored` tokens from a completions answer, or TeacherServiceError naming
    `where` (the server and the batch)."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or len(choices) != len(scored):
        got = len(choices) if isinstance(choices, list) else "no"
        raise TeacherServiceError(f"{where} answered {got} choices for {len(scored)} sequences; a teacher server "
                                  f"answers one choice per prompt (docs/distillation.md).")
    choices = sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
    out = []
    for number, (choice, prompt, tokens) in enumerate(zip(choices, prompts, scored, strict=True)):
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
        if not isinstance(values, list):
            raise TeacherServiceError(f"{where} answered sequence {number} without logprobs "
                                      f"(choices[].logprobs.token_logprobs); a teacher server must return the logprob "
                                      f"of every prompt token (vLLM does with echo and max_tokens 0).")
        total = len(prompt) + len(tokens)
        if len(values) not in (total, total + 1):  # + 1: a server that generates a token despite max_tokens 0
            raise TeacherServiceError(f"{where} answered {len(values)} logprobs for the {total} tokens of sequence "
                                      f"{number}; a teacher server returns one logprob per prompt token.")
        mine = values[len(prompt):total]
        bad = next((v for v in mine if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                    or v > 1e-6), "ok")
        if bad != "ok":
            raise TeacherServiceError(f"{where} answered {shown(bad)} as a logprob in sequence {number}; every "
                                      f"logprob of a sampled token must be a finite number <= 0.")
        out.append([float(v) for v in mine])
    return out
