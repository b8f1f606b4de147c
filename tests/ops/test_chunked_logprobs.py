"""Logprobs and entropy from hidden states in chunks equal the full-logits computation, gradients included."""

import pytest
import torch

from lit_rlhf.algos.rollout import response_logprobs_and_entropy
from lit_rlhf.ops.logprobs import chunked_logprobs_and_entropy, kept_logits_mib, logprobs_and_entropy


@pytest.mark.parametrize("recompute", [True, False], ids=["recomputed", "kept"])
@pytest.mark.parametrize("chunk_size", [1, 7, 64, 1000])
def test_chunked_logprobs_match_the_full_logits_with_their_gradients(chunk_size, recompute):
    torch.manual_seed(0)
    hidden = torch.randn(50, 16, requires_grad=True)
    head = torch.nn.Linear(16, 97, bias=True)
    tokens = torch.randint(0, 97, (50,))
    weights = torch.randn(50)  # any downstream use of the logprobs

    full_logprobs, full_entropy = logprobs_and_entropy(head(hidden).unsqueeze(0), tokens.unsqueeze(0), 0.7)
    full_grads = torch.autograd.grad((full_logprobs[0] * weights).sum(), [hidden, head.weight, head.bias])
    logprobs, entropy = chunked_logprobs_and_entropy(hidden, head, tokens, 0.7, chunk_size, recompute)
    grads = torch.autograd.grad((logprobs * weights).sum(), [hidden, head.weight, head.bias])

    torch.testing.assert_close(logprobs, full_logprobs[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy, full_entropy[0], atol=1e-5, rtol=0)
    assert not entropy.requires_grad
    for got, expected in zip(grads, full_grads, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_without_grad_nothing_is_kept():
    hidden, head = torch.randn(10, 8), torch.nn.Linear(8, 11)
    with torch.no_grad():
        logprobs, _ = chunked_logprobs_and_entropy(hidden, head, torch.zeros(10, dtype=torch.long), 1.0, 4)
    assert logprobs.shape == (10,) and not logprobs.requires_grad


def test_kept_logits_are_float32_logits_and_log_probabilities():
    assert kept_logits_mib(1024, 50304) == 1024 * 50304 * (4 + 4) / 2**20  # 393 MiB


@pytest.mark.parametrize("budget, recomputed", [(None, True), (0.0, True), (1024.0, False)])
def test_the_update_recomputes_the_logits_only_beyond_the_budget(budget, recomputed, monkeypatch):
    from transformers import AutoModelForCausalLM

    from lit_rlhf.assets import TINY_PYTHIA

    calls = []
    checkpoint = torch.utils.checkpoint.checkpoint
    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", lambda *a, **k: calls.append(1) or checkpoint(*a, **k))
    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
    torch.manual_seed(0)
    queries, responses = torch.randint(3, 500, (4, 5)), torch.randint(3, 500, (4, 6))  # 24 response tokens
    mask = torch.ones(4, 6, dtype=torch.bool)
    logprobs, _ = response_logprobs_and_entropy(model, queries, torch.ones_like(queries), responses, mask, 1.0,
                                                chunk_size=8, logits_budget_mib=budget)
    logprobs.sum().backward()
    assert bool(calls) == recomputed  # 24 tokens x 979 (vocab) x 8 bytes: 0.18 MiB, kept under 1024 MiB
    assert model.get_output_embeddings().weight.grad.abs().sum() > 0


@pytest.mark.parametrize("chunk_size", [None, 8], ids=["full logits", "chunked"])
def test_logprobs_without_entropy_are_the_same_bits_and_skip_the_entropy(chunk_size, monkeypatch):
    """The reference's and the old policy's no-grad logprobs leave the entropy out (nothing reads it there)."""
    from transformers import AutoModelForCausalLM

    from lit_rlhf.algos.rollout import batched_logprobs
    from lit_rlhf.assets import TINY_PYTHIA

    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
    torch.manual_seed(1)
    queries, responses = torch.randint(3, 500, (4, 5)), torch.randint(3, 500, (4, 6))
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3, [1] * 6, [1] + [0] * 5], dtype=torch.bool)
    with torch.no_grad():
        with_entropy, entropy = response_logprobs_and_entropy(model, queries, torch.ones_like(queries), responses,
                                                              mask, 0.7, chunk_size)
    exps = []
    exp = torch.Tensor.exp
    monkeypatch.setattr(torch.Tensor, "exp", lambda self: exps.append(self.shape) or exp(self))
    with torch.no_grad():
        alone = batched_logprobs(model, queries, torch.ones_like(queries), responses, mask, 0.7, None, chunk_size)
    assert torch.equal(alone, with_entropy) and entropy.shape == alone.shape
    assert not exps  # the entropy's exp over the vocabulary did not run
