"""Logprobs and entropy from hidden states in chunks equal the full-logits computation, gradients included."""

import pytest
import torch

from lit_rlhf.ops.logprobs import chunked_logprobs_and_entropy, logprobs_and_entropy


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 1000])
def test_chunked_logprobs_match_the_full_logits_with_their_gradients(chunk_size):
    torch.manual_seed(0)
    hidden = torch.randn(50, 16, requires_grad=True)
    head = torch.nn.Linear(16, 97, bias=True)
    tokens = torch.randint(0, 97, (50,))
    weights = torch.randn(50)  # any downstream use of the logprobs

    full_logprobs, full_entropy = logprobs_and_entropy(head(hidden).unsqueeze(0), tokens.unsqueeze(0), 0.7)
    full_grads = torch.autograd.grad((full_logprobs[0] * weights).sum(), [hidden, head.weight, head.bias])
    logprobs, entropy = chunked_logprobs_and_entropy(hidden, head, tokens, 0.7, chunk_size)
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
