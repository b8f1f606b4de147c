"""A reward server that misbehaves on purpose (stdlib http.server, in a thread of the test process)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def length_scores(body: dict) -> list[float]:
    return [float(len(c)) for c in body["completions"]]


class FakeRewardServer:
    """Answers GET /health and POST /score; `answer(number, body) -> (status, text)` decides each /score answer
    (number counts the /score requests from 0). stop() closes the port: later requests cannot connect."""

    def __init__(self, answer: Callable[[int, dict], tuple[int, str]] | None = None, columns: list[str] = (),
                 port: int = 0):
        self.answer = answer or (lambda n, body: (200, json.dumps({"scores": length_scores(body)})))
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, status: int, text: str, trickle_s: float = 0.0) -> None:
                """The answer; with trickle_s, its body one byte every trickle_s seconds."""
                data = text.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    for piece in [data] if not trickle_s else [bytes([byte]) for byte in data]:
                        self.wfile.write(piece)
                        self.wfile.flush()
                        time.sleep(trickle_s)
                except OSError:  # the client gave up (its timeout, after a hang) and closed the connection; a
                    pass  # traceback here would reach the stderr of whatever test this worker runs next

            def do_GET(self):
                self.reply(200, json.dumps({"status": "ok", "reward": "fake", "columns": list(columns)}))

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.headers.append(dict(self.headers))
                number = len(server.requests)
                server.requests.append(body)
                self.reply(*server.answer(number, body))

        ThreadingHTTPServer.allow_reuse_address = True
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeRewardServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def hang(seconds: float) -> Callable[[int, dict], tuple[int, str]]:
    def answer(number: int, body: dict) -> tuple[int, str]:
        time.sleep(seconds)
        return 200, json.dumps({"scores": length_scores(body)})
    return answer


def trickle(seconds_per_byte: float) -> Callable[[int, dict], tuple[int, str, float]]:
    """A server that answers at once, then sends its body one byte every seconds_per_byte."""
    def answer(number: int, body: dict) -> tuple[int, str, float]:
        return 200, json.dumps({"scores": length_scores(body)}), seconds_per_byte
    return answer


def chat_reply(content: str) -> str:
    """An OpenAI chat-completions answer holding `content`."""
    return json.dumps({"id": "fake", "object": "chat.completion", "created": 0, "model": "fake-judge",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                    "finish_reason": "stop"}]})


def judged_completion(body: dict) -> str:
    """The completion a judge template shows (between 'Response: ' and the blank line before 'Score:')."""
    text = body["messages"][0]["content"]
    return text.split("Response: ", 1)[1].rsplit("\n\nScore:", 1)[0]


def length_biased_judge(number: int, body: dict) -> tuple[int, str]:
    """A judge with a pure length bias: one point per 4 characters of the completion, up to 10."""
    return 200, chat_reply(str(min(10, len(judged_completion(body)) // 4)))


def longer_wins_judge(number: int, body: dict) -> tuple[int, str]:
    """A pairwise judge that prefers the longer response (A, B or tie)."""
    text = body["messages"][0]["content"]
    a, b = text.split("Response A: ", 1)[1].rsplit("\n\nBetter:", 1)[0].split("\n\nResponse B: ", 1)
    return 200, chat_reply("A" if len(a) > len(b) else "B" if len(b) > len(a) else "tie")
