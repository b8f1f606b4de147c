"""teacher=served against a running `vllm serve` of the tiny model (vLLM's OpenAI-compatible server, CPU): it
passes the checks before training (/v1/models, the student's ids on /tokenize) and gives the logprobs a loaded
teacher of the same weights gives."""

import json
import socket
import subprocess
import sys
import time
import urllib.request
import warnings

import pytest
import torch
from transformers import AutoTokenizer

from lit_rlhf.models.teacher import CausalLMTeacher
from lit_rlhf.remote.teacher import ServedTeacher
from tests.conftest import TINY_PYTHIA
from tests.remote.test_served_teacher import padded_batch

# every test here starts a vLLM engine or server, or runs train.py: the integration tier
pytestmark = pytest.mark.integration

START_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("vllm_serve") / "server.log"
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", TINY_PYTHIA,
               "--served-model-name", "teacher", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
               "--max-model-len", "256", "--kv-cache-memory-bytes", str(256 * 2**20), "--enforce-eager"]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"vllm serve exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=5) as answer:
                    json.load(answer)
                break
            except OSError:
                if time.time() > deadline:
                    pytest.fail(f"vllm serve did not answer within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")
                time.sleep(1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def test_a_vllm_served_teacher_gives_the_logprobs_of_a_loaded_one(server):
    tokenizer = AutoTokenizer.from_pretrained(TINY_PYTHIA)
    batch = padded_batch(tokenizer)
    teacher = ServedTeacher(server + "/v1", batch_size=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        teacher.load(tokenizer)  # /v1/models, then the student's ids on vLLM's /tokenize
    assert teacher.served_model == "teacher"
    assert not [w for w in caught if "/tokenize" in str(w.message)]  # the tokenizer was checked, not trusted
    served = teacher.logprobs(*batch, temperature=1.0)
    loaded = CausalLMTeacher(TINY_PYTHIA)
    loaded.load(tokenizer)
    expected = loaded.logprobs(*batch, temperature=1.0)
    assert served.shape == expected.shape == (3, 5)
    torch.testing.assert_close(served, expected, atol=1e-4, rtol=0)
    assert served[2].eq(0).all() and served[0, 3:].eq(0).all()
