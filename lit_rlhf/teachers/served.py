"""ServedTeacher: an on-policy distillation teacher behind an OpenAI-compatible completions server (`vllm serve
<teacher>`), which scores the student's token ids as the prompt of a request that generates nothing:

    POST {url}/v1/completions  {"model": m, "prompt": [[token ids]], "max_tokens": 0, "echo": true, "logprobs": 0}
    -> {"choices": [{"index": i, "logprobs": {"token_logprobs": [null, float, ...]}}]}

token_logprobs holds the logprob of each given token after the ones before it (the first has none), so a server that
returns only the top-k alternatives still gives every sampled token's own logprob. With top_logprobs: K (for
algo.divergence=generalized_jsd) the request asks for the K most likely tokens at every position, as ids
(`"logprobs": K, "return_tokens_as_token_ids": true`: vLLM's top_logprobs entries {"token_id:<id>": logprob}); a
server answers K of them, K + 1 where the sampled token is not among them. Requests, timeouts, retries and auth
follow HTTPService's rules (lit_rlhf.remote.http), as reward=http's do.
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
                 timeout_s: float = 60.0, retries: int = 3, backoff_s: float = 0.5, auth_env: str | None = None,
                 top_logprobs: int | None = None):
        url = url.rstrip("/").removesuffix("/v1") if isinstance(url, str) else url
        super().__init__(url, batch_size, max_concurrency, timeout_s, retries, backoff_s, auth_env)
        if top_logprobs is not None and (not isinstance(top_logprobs, int) or isinstance(top_logprobs, bool)
                                         or top_logprobs < 1):
            raise ConfigError(f"teacher.top_logprobs={top_logprobs!r} must be a whole number >= 1 (the teacher's "
                              f"most likely tokens per position; vLLM serves up to its --max-logprobs, 20 by "
                              f"default), or null.")
        self.model, self.top_logprobs = model, top_logprobs
        self.served_model: str | None = None
        self.vocabulary_size: int | None = None

    def load(self, tokenizer: Any) -> None:
        """Before training: the server is up, serves the model, and reads token ids as the student's tokenizer
        writes them (checked on its /tokenize where it has one)."""
        if self.served_model is not None:
            return
        self.served_model = self.pick_served_model(self.model)
        self.check_vocabulary(tokenizer, f"{self.server_name} {self.shown_url}")
        self.vocabulary_size = len(tokenizer)

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
        return self.scores(queries, query_mask, responses, response_mask, temperature, columns)[0]

    def scores(self, queries: torch.Tensor, query_mask: torch.Tensor, responses: torch.Tensor,
               response_mask: torch.Tensor, temperature: float, columns: dict[str, list] | None = None
               ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The logprobs of the response tokens (N,R, zero outside response_mask) and, with top_logprobs K, the
        teacher's most likely tokens at each of them: ids and logprobs (N,R,K+1; padding: id 0, logprob -inf)."""
        self.check_temperature(temperature)
        if self.served_model is None:
            raise ConfigError("the teacher was not loaded: a module loads it with the student (Sampler.attach).")
        lengths = [int(row.nonzero().max()) + 1 if row.any() else 0 for row in response_mask.cpu()]  # N
        rows = [i for i, length in enumerate(lengths) if length]
        prompts = [queries[i][query_mask[i].bool()].tolist() for i in rows]
        scored = [responses[i, :lengths[i]].tolist() for i in rows]
        top = self.top_logprobs

        def answer(where: str, start: int, end: int) -> list[tuple[list[float], list[dict[int, float]] | None]]:
            payload = {"model": self.served_model,
                       "prompt": [p + s for p, s in zip(prompts[start:end], scored[start:end], strict=True)],
                       "max_tokens": 0, "echo": True, "logprobs": top or 0, "temperature": 1.0,
                       **({"return_tokens_as_token_ids": True} if top else {})}
            body = self.request("POST", "/v1/completions", payload, where)
            values = parse_token_logprobs(body, prompts[start:end], scored[start:end], where)
            tops = (parse_top_logprobs(body, prompts[start:end], scored[start:end], top, self.vocabulary_size, where)
                    if top else [None] * len(values))
            return list(zip(values, tops, strict=True))

        out = torch.zeros(responses.shape, dtype=torch.float32)  # N,R
        top_ids = torch.zeros((*responses.shape, top + 1), dtype=torch.long) if top else None  # N,R,K+1
        top_values = torch.full((*responses.shape, top + 1), float("-inf")) if top else None  # N,R,K+1
        for i, (values, tops) in zip(rows, self.in_batches(len(rows), answer, "sequences"), strict=True):
            out[i, :len(values)] = torch.tensor(values, dtype=torch.float32)
            for t, alternatives in enumerate(tops or []):
                top_ids[i, t, :len(alternatives)] = torch.tensor(list(alternatives))
                top_values[i, t, :len(alternatives)] = torch.tensor(list(alternatives.values()))
        device, mask = responses.device, response_mask.bool()
        if top:
            top_ids = top_ids.to(device).masked_fill(~mask[..., None], 0)
            top_values = top_values.to(device).masked_fill(~mask[..., None], float("-inf"))
        return out.to(device) * response_mask, top_ids, top_values


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


def parse_top_logprobs(body: dict, prompts: list[list[int]], scored: list[list[int]], k: int, vocabulary_size: int,
                       where: str) -> list[list[dict[int, float]]]:
    """Each sequence's most likely tokens at each of its `scored` positions, {id: logprob}, from a completions answer
    already checked by parse_token_logprobs; or TeacherServiceError naming `where`."""
    choices = sorted(body["choices"], key=lambda c: c.get("index", 0))
    out = []
    for number, (choice, prompt, tokens) in enumerate(zip(choices, prompts, scored, strict=True)):
        entries = choice["logprobs"].get("top_logprobs")
        total = len(prompt) + len(tokens)
        if not isinstance(entries, list) or len(entries) < total:
            raise TeacherServiceError(f"{where} answered sequence {number} without the top logprobs of every token "
                                      f"(choices[].logprobs.top_logprobs); teacher.top_logprobs={k} needs a server "
                                      f"that returns them (vllm serve <teacher> --max-logprobs {max(k, 20)}).")
        positions = []
        for entry in entries[len(prompt):total]:
            parsed = parse_alternatives(entry, vocabulary_size)
            if parsed is None or not k <= len(parsed) <= k + 1:
                raise TeacherServiceError(
                    f"{where} answered {shown(entry)} as the top logprobs of a token of sequence {number}; with "
                    f"teacher.top_logprobs={k} each is {k} or {k + 1} entries {{\"token_id:<id>\": logprob <= 0}} "
                    f"with ids of the student's vocabulary (vLLM with return_tokens_as_token_ids).")
            positions.append(parsed)
        out.append(positions)
    return out


def parse_alternatives(entry: Any, vocabulary_size: int) -> dict[int, float] | None:
    """{"token_id:5": -0.1, ...} -> {5: -0.1, ...}, or None where an entry is not that."""
    if not isinstance(entry, dict):
        return None
    parsed = {}
    for key, value in entry.items():
        number = key.removeprefix("token_id:") if isinstance(key, str) and key.startswith("token_id:") else ""
        if not (number.isascii() and number.isdigit()) or int(number) >= vocabulary_size or isinstance(value, bool) \
                or not isinstance(value, (int, float)) or not math.isfinite(value) or value > 1e-6:
            return None
        parsed[int(number)] = float(value)
    return parsed
