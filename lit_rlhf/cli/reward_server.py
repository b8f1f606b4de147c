"""A reward server: any lit_rlhf reward behind the schema of lit_rlhf.remote.schema, on FastAPI and uvicorn
(`pip install -e ".[serve]"`; `python -m lit_rlhf.serve reward=...` runs it).

Requests that arrive within max_wait_ms of each other are scored by one reward call (up to max_batch_size
completions), in a worker thread, one call at a time: a reward model sees full batches and the event loop keeps
answering /health while it works.
"""

import asyncio
import contextlib
import hmac
import inspect
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, model_validator

from lit_rlhf.errors import ConfigError, UnavailableError
from lit_rlhf.remote.http import SERVED_TOKEN, auth_token


class ScoreRequest(BaseModel):
    """POST /score's body."""

    prompts: list[str]
    completions: list[str]
    columns: dict[str, list[Any]] = {}

    @model_validator(mode="after")
    def one_entry_per_completion(self):
        n = len(self.completions)
        if len(self.prompts) != n or any(len(v) != n for v in self.columns.values()):
            raise ValueError("prompts, completions and every column must have one entry per completion")
        return self


def reward_columns(reward) -> list[str]:
    """The columns a reward reads (what /health tells clients to send): the dataset columns it needs, and those
    every rollout makes (`stopped`) where it takes them."""
    from lit_rlhf.rewards.weighted_sum import named_parts
    from lit_rlhf.rollout.scoring import column_needs
    from lit_rlhf.rollout.trajectory import ROLLOUT_COLUMNS

    made = {column for part in named_parts(reward).values() for column in ROLLOUT_COLUMNS
            if takes_parameter(part, column)}
    return sorted({column for _, column in column_needs(reward, [])} | made)


def takes_parameter(function, name: str) -> bool:
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def score_now(reward, prompts: list[str], completions: list[str], columns: dict[str, list]) -> list[float]:
    """The reward's checked scores (one finite float per completion) or ConfigError naming what went wrong."""
    from lit_rlhf.rewards import reward_name
    from lit_rlhf.rollout.scoring import call_checked

    return call_checked(reward_name(reward), reward, prompts, completions, columns).tolist()


class Batcher:
    """Gathers concurrent /score requests into reward calls; one call at a time, in a worker thread."""

    def __init__(self, reward, max_batch_size: int, max_wait_s: float):
        self.reward, self.max_batch_size, self.max_wait_s = reward, max_batch_size, max_wait_s
        self.queue: asyncio.Queue = asyncio.Queue()

    async def score(self, prompts: list[str], completions: list[str], columns: dict[str, list]) -> list[float]:
        future = asyncio.get_running_loop().create_future()
        await self.queue.put(((prompts, completions, columns), future))
        return await future

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.queue.get()]
            deadline = loop.time() + self.max_wait_s
            while sum(len(item[0][1]) for item in batch) < self.max_batch_size:
                try:
                    batch.append(await asyncio.wait_for(self.queue.get(), max(deadline - loop.time(), 0)))
                except TimeoutError:
                    break
            groups: dict[tuple[str, ...], list] = {}  # requests sending the same columns go together
            for item in batch:
                groups.setdefault(tuple(sorted(item[0][2])), []).append(item)
            for group in groups.values():
                await self.score_group(group)

    async def score_group(self, group: list) -> None:
        prompts = [p for (request, _) in group for p in request[0]]
        completions = [c for (request, _) in group for c in request[1]]
        columns = {name: [v for (request, _) in group for v in request[2][name]] for name in group[0][0][2]}
        try:
            scores = await asyncio.to_thread(score_now, self.reward, prompts, completions, columns)
        except Exception as err:  # every request of the call gets the error
            for _, future in group:
                if not future.done():
                    future.set_exception(err)
            return
        start = 0
        for (request, future) in group:
            if not future.done():
                future.set_result(scores[start:start + len(request[1])])
            start += len(request[1])

    def fail_pending(self) -> None:
        while not self.queue.empty():
            _, future = self.queue.get_nowait()
            if not future.done():
                future.set_exception(RuntimeError("the server is shutting down"))


class BodyLimit:
    """An ASGI wrapper that answers 413 to a request whose body is larger than max_bytes (by its Content-Length, or
    as it arrives when it has none), before the app reads or parses any of it.

    Before answering it reads and discards what the client is still sending, up to DRAIN_FACTOR * max_bytes and
    DRAIN_SECONDS: closing a socket with unread bytes makes the kernel reset the connection, and a client still
    uploading then loses the 413 (it sees "peer closed connection") instead of the reason."""

    DRAIN_FACTOR, DRAIN_SECONDS = 8, 10.0

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            if int(declared) <= self.DRAIN_FACTOR * self.max_bytes:
                await self.drain(receive, 0)
            return await self.too_large(send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                if message.get("more_body"):
                    await self.drain(receive, size)
                return await self.too_large(send)
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def drain(self, receive, size: int) -> None:
        """Discards the rest of the body (nothing is kept), stopping at the drain limits."""

        async def discard():
            received = size
            while received <= self.DRAIN_FACTOR * self.max_bytes:
                message = await receive()
                if message["type"] != "http.request" or not message.get("more_body"):
                    return
                received += len(message.get("body", b""))

        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(discard(), self.DRAIN_SECONDS)

    async def too_large(self, send) -> None:
        import json

        detail = json.dumps({"detail": f"the request body is larger than the server's max_body_mb "
                                       f"({self.max_bytes / 2**20:g} MB); send fewer completions per request "
                                       f"(reward.batch_size)"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(detail)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": detail})


def create_app(reward, name: str, max_batch_size: int = 256, max_wait_ms: float = 5.0,
               auth_env: str | None = None, max_body_mb: float = 8.0):
    """The ASGI app serving `reward`: POST /score, GET /health (FastAPI's), behind a limit of max_body_mb MB on a
    request's body."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    token = auth_token("auth_env", auth_env, SERVED_TOKEN)
    columns = reward_columns(reward)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        app.state.batcher = Batcher(reward, max_batch_size, max_wait_ms / 1000)
        worker = asyncio.create_task(app.state.batcher.run())
        yield
        worker.cancel()
        app.state.batcher.fail_pending()

    app = FastAPI(title="lit_rlhf reward server", lifespan=lifespan)

    @app.middleware("http")
    async def check_token(request: Request, call_next: Callable):
        given = request.headers.get("authorization", "")
        if token and not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return JSONResponse({"detail": "missing or wrong bearer token"}, status_code=401)
        return await call_next(request)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "reward": name, "columns": columns}

    @app.post("/score")
    async def score(body: ScoreRequest):
        missing = [c for c in columns if c not in body.columns]
        if missing:
            return JSONResponse({"detail": f"the reward reads the dataset column {missing[0]!r}; send it in "
                                           f"\"columns\""}, status_code=422)
        try:
            scores = await app.state.batcher.score(body.prompts, body.completions, body.columns)
        except Exception as err:
            return JSONResponse({"detail": str(err)}, status_code=500)
        return {"scores": scores}

    return BodyLimit(app, int(max_body_mb * 2**20))


def require_serving_extra() -> None:
    """FastAPI and uvicorn are the `serve` extra: without them, one line saying how to install them."""
    import importlib.util

    missing = [name for name in ("fastapi", "uvicorn") if importlib.util.find_spec(name) is None]
    if missing:
        raise UnavailableError(f"python -m lit_rlhf.serve needs {' and '.join(missing)} (not installed here); "
                               f"pip install -e \".[serve]\" (or pip install fastapi uvicorn).")


def graceful_server_class():
    import signal

    import uvicorn

    class GracefulServer(uvicorn.Server):
        """uvicorn's server, whose SIGINT or SIGTERM stop (requests in flight answered) ends with exit code 0:
        uvicorn re-raises the signal once it has stopped, which would end the process by it."""

        @contextlib.contextmanager
        def capture_signals(self):
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return GracefulServer


def serve(reward, name: str, host: str = "127.0.0.1", port: int = 8000, max_batch_size: int = 256,
          max_wait_ms: float = 5.0, auth_env: str | None = None, max_body_mb: float = 8.0,
          announce: Callable[[str], None] = print) -> None:
    """Serves `reward` until SIGINT or SIGTERM; requests in flight are answered before it stops."""
    import socket

    require_serving_extra()
    import uvicorn

    GracefulServer = graceful_server_class()
    app = create_app(reward, name, max_batch_size, max_wait_ms, auth_env, max_body_mb)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port} ({err.strerror}); pick another port (port=8001, or port=0 "
                          f"for a free one) or host.") from None
    server = GracefulServer(uvicorn.Config(app, log_level="warning", lifespan="on"))
    announce(f"Serving the reward {name} on http://{host}:{sock.getsockname()[1]} (POST /score, GET /health); "
             f"Ctrl-C stops it.")
    server.run(sockets=[sock])
    announce("Reward server stopped.")
