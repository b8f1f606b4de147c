"""Running `vllm serve` (vLLM's OpenAI-compatible server, the CPU build) for a test: a free port, the server started
with its output in a log file, waited for until /v1/models answers, and stopped."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

START_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(model: str, port: int, log_path: Path, *flags: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`vllm serve model` on 127.0.0.1:port (float32, a 256-token context, 256 MiB of KV cache, eager) with `flags`,
    once it answers; a server that exits or does not answer in time fails the test with its log."""
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1",
               "--port", str(port), "--dtype", "float32", "--max-model-len", "256",
               "--kv-cache-memory-bytes", str(256 * 2**20), "--enforce-eager", *flags]
    with open(log_path, "a") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    url, deadline = f"http://127.0.0.1:{port}", time.time() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            pytest.fail(f"vllm serve exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=5) as answer:
                json.load(answer)
            return process
        except OSError:
            if time.time() > deadline:
                stop(process)
                pytest.fail(f"vllm serve did not answer within {START_TIMEOUT_S} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(1)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
