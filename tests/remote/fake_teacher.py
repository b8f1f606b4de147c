"""An OpenAI-compatible teacher server in a thread of the test process, as `vllm serve` answers: GET /v1/models,
POST /tokenize, and POST /v1/completions with echo and max_tokens 0 (the prompt's logprobs), computed with a real
causal LM. `routes` replaces any route's answer: {(method, path): answer(body) -> (status, text)}."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch


def prompt_logprobs(model, ids: list[int]) -> list[float | None]:
    """log p(ids[t] | ids[:t]) for t >= 1, None for the first token: what a server's echo returns."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()  # T,V
    chosen = logits[:-1].log_softmax(-1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)  # T-1
    return [None, *chosen.tolist()]


def prompt_top_logprobs(model, ids: list[int], k: int, as_ids: bool) -> list[dict[str, float] | None]:
    """vLLM's top_logprobs of an echoed prompt: at each token after the first, the k most likely tokens and the
    given one, keyed "token_id:<id>" (return_tokens_as_token_ids) or by the id as text."""
    with torch.no_grad():
        log_probs = model(torch.tensor([ids])).logits[0, :-1].float().log_softmax(-1)  # T-1,V
    out: list[dict[str, float] | None] = [None]
    for t, row in enumerate(log_probs):
        chosen = [*row.topk(k).indices.tolist(), ids[t + 1]]
        out.append({(f"token_id:{i}" if as_ids else str(i)): row[i].item() for i in chosen})
    return out


class FakeTeacherServer:
    def __init__(self, model=None, tokenizer=None, name: str = "teacher",
                 routes: dict[tuple[str, str], Callable[[dict], tuple[int, str]]] | None = None):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.routes = {("GET", "/v1/models"): self.models, ("POST", "/tokenize"): self.tokenize,
                       ("POST", "/v1/completions"): self.completions, **(routes or {})}
        self.requests: list[tuple[str, str, dict]] = []
        self.headers: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else {}
                server.requests.append((method, self.path, body))
                server.headers.append(dict(self.headers))
                route = server.routes.get((method, self.path))
                status, text = route(body) if route else (404, '{"detail": "Not Found"}')
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self.answer("GET")

            def do_POST(self):
                self.answer("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def models(self, body: dict) -> tuple[int, str]:
        return 200, json.dumps({"object": "list", "data": [{"id": self.name, "object": "model"}]})

    def tokenize(self, body: dict) -> tuple[int, str]:
        ids = self.tokenizer(body["prompt"], add_special_tokens=body.get("add_special_tokens", True))["input_ids"]
        return 200, json.dumps({"tokens": ids, "count": len(ids), "max_model_len": 2048})

    def completions(self, body: dict) -> tuple[int, str]:
        prompts = body["prompt"] if body["prompt"] and isinstance(body["prompt"][0], list) else [body["prompt"]]
        choices = [{"index": i, "text": "", "finish_reason": "length",
                    "logprobs": {"token_logprobs": prompt_logprobs(self.model, ids), "tokens": [str(t) for t in ids]}}
                   for i, ids in enumerate(prompts)]
        if body.get("logprobs"):
            for choice, ids in zip(choices, prompts, strict=True):
                choice["logprobs"]["top_logprobs"] = prompt_top_logprobs(
                    self.model, ids, body["logprobs"], bool(body.get("return_tokens_as_token_ids")))
        # in reverse: the client orders the choices by their index
        return 200, json.dumps({"object": "text_completion", "model": self.name, "choices": choices[::-1]})

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeTeacherServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
