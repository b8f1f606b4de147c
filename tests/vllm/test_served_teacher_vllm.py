"""teacher=served against a running `vllm serve` of the tiny model (vLLM's OpenAI-compatible server, CPU): it
passes the checks before training (/v1/models, the student's ids on /tokenize) and gives the logprobs a loaded
teacher of the same weights gives."""

import warnings

import pytest
import torch
from transformers import AutoTokenizer

from lit_rlhf.teachers.causal_lm import CausalLMTeacher
from lit_rlhf.teachers.served import ServedTeacher
from tests.conftest import TINY_PYTHIA
from tests.teachers.test_served_teacher import padded_batch
from tests.vllm.servers import free_port, serve, stop

# every test here starts a vLLM engine or server, or runs train.py: the integration tier
pytestmark = pytest.mark.integration

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    process = serve(TINY_PYTHIA, port, tmp_path_factory.mktemp("vllm_serve") / "server.log",
                    "--served-model-name", "teacher")
    yield f"http://127.0.0.1:{port}"
    stop(process)


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
