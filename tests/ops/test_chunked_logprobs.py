"""Logprobs and entropy from hidden states in chunks equal the full-logits computation, gradients included."""

import math

import pytest
import torch

from lit_rlhf.models.forwards import response_logprobs_and_entropy
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


def test_kept_logits_are_one_tensor_in_the_output_layer_dtype():
    assert kept_logits_mib(1024, 50304) == 1024 * 50304 * 4 / 2**20  # float32: 196.5 MiB
    assert kept_logits_mib(1024, 50304, bytes_per_entry=2) == 1024 * 50304 * 2 / 2**20  # bfloat16


def saved_vocabulary_tensors(compute, vocab_size: int) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """(shape, dtype) of every tensor of vocab_size columns that autograd saves for the backward pass of compute()."""
    saved = []

    def pack(tensor):
        if tensor.dim() >= 1 and tensor.shape[-1] == vocab_size:
            saved.append((tuple(tensor.shape), tensor.dtype))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        compute()
    return saved


@pytest.mark.parametrize("budget, kept", [(None, False), (0.0, False), (1024.0, True)])
def test_the_update_keeps_the_logits_only_within_the_budget(budget, kept):
    from transformers import AutoModelForCausalLM

    from lit_rlhf.assets import TINY_PYTHIA

    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
    vocab_size = model.get_output_embeddings().out_features
    torch.manual_seed(0)
    queries, responses = torch.randint(3, 500, (4, 5)), torch.randint(3, 500, (4, 6))  # 24 response tokens
    mask = torch.ones(4, 6, dtype=torch.bool)

    def update():
        logprobs, _ = response_logprobs_and_entropy(model, queries, torch.ones_like(queries), responses, mask, 1.0,
                                                    chunk_size=8, logits_budget_mib=budget)
        logprobs.sum().backward()

    saved = saved_vocabulary_tensors(update, vocab_size)
    # 3 chunks of 8 tokens; 24 tokens x 979 (vocab) x 4 bytes: 0.09 MiB, kept under 1024 MiB
    assert saved.count(((8, vocab_size), torch.float32)) == 3 * kept
    assert model.get_output_embeddings().weight.grad.abs().sum() > 0


class LargestFloat32(torch.utils._python_dispatch.TorchDispatchMode):
    """The most elements of any float32 tensor an op made while active."""

    def __init__(self):
        super().__init__()
        self.elements = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float32:
                self.elements = max(self.elements, tensor.numel())
        return out


@pytest.mark.parametrize("recompute", [True, False], ids=["recomputed", "kept"])
def test_bfloat16_logits_are_never_float32_whole(recompute, monkeypatch):
    """With a bfloat16 output layer the (chunk, V) logits are held in bfloat16 only, and the float32 log-probabilities
    a block of rows at a time (here 4 rows), in the forward and the backward; the logprobs, entropy and gradients are
    float32 maths on the bfloat16 logits."""
    from lit_rlhf.ops import logprobs as logprobs_module

    monkeypatch.setattr(logprobs_module, "ENTROPY_BLOCK_ELEMENTS", 4 * 97)
    torch.manual_seed(0)
    hidden = torch.randn(32, 16, dtype=torch.bfloat16, requires_grad=True)
    head = torch.nn.Linear(16, 97, bias=False).to(torch.bfloat16)
    tokens = torch.randint(0, 97, (32,))
    largest = LargestFloat32()
    with largest:
        logprobs, entropy = chunked_logprobs_and_entropy(hidden, head, tokens, 0.7, 32, recompute)
        (grad,) = torch.autograd.grad(logprobs.sum(), [hidden])
    assert largest.elements == 4 * 97 and logprobs.dtype == torch.float32 and grad.dtype == torch.bfloat16

    reference_hidden = hidden.detach().requires_grad_()
    logits = head(reference_hidden)  # bfloat16, then float32 maths
    expected, expected_entropy = logprobs_and_entropy(logits.unsqueeze(0), tokens.unsqueeze(0), 0.7)
    (expected_grad,) = torch.autograd.grad(expected.sum(), [reference_hidden])
    torch.testing.assert_close(logprobs, expected[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy, expected_entropy[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(grad, expected_grad, atol=0, rtol=0)


@pytest.mark.parametrize("chunk_size", [None, 8], ids=["full logits", "chunked"])
def test_logprobs_without_entropy_are_the_same_bits_and_skip_the_entropy(chunk_size, monkeypatch):
    """The reference's and the old policy's no-grad logprobs leave the entropy out (nothing reads it there)."""
    from transformers import AutoModelForCausalLM

    from lit_rlhf.assets import TINY_PYTHIA
    from lit_rlhf.models.forwards import batched_logprobs

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


class VocabularyTensors(torch.utils._python_dispatch.TorchDispatchMode):
    """How many (rows, V) tensors the ops made while active (views of one included: a slice or a written row block
    is not (rows, V))."""

    def __init__(self, rows: int, vocab_size: int):
        super().__init__()
        self.shape, self.made = (rows, vocab_size), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            self.made += isinstance(tensor, torch.Tensor) and tuple(tensor.shape) == self.shape
        return out


@pytest.mark.parametrize("recompute", [True, False], ids=["recomputed", "kept"])
def test_the_backward_writes_the_gradient_over_the_logits(recompute, monkeypatch):
    """The backward makes no (chunk, V) tensor but the recomputed logits: the logits' gradient overwrites them block
    by block (here 4 rows), so a chunk's logits and their gradient are never held together (one (chunk, V) tensor
    less at the update's peak); the gradients are still those of the full logits (the first test)."""
    from lit_rlhf.ops import logprobs as logprobs_module

    monkeypatch.setattr(logprobs_module, "ENTROPY_BLOCK_ELEMENTS", 4 * 97)
    torch.manual_seed(0)
    hidden = torch.randn(32, 16, requires_grad=True)
    head = torch.nn.Linear(16, 97)
    logprobs, _ = chunked_logprobs_and_entropy(hidden, head, torch.randint(0, 97, (32,)), 0.7, 32, recompute)
    made = VocabularyTensors(32, 97)
    with made:
        logprobs.sum().backward()
    assert made.made == (1 if recompute else 0)
    assert hidden.grad.abs().sum() > 0


def test_a_second_backward_through_kept_logits_fails_rather_than_reads_their_gradient():
    hidden = torch.randn(8, 16, requires_grad=True)
    logprobs, _ = chunked_logprobs_and_entropy(hidden, torch.nn.Linear(16, 97), torch.zeros(8, dtype=torch.long),
                                               1.0, 8, recompute=False)
    logprobs.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        logprobs.sum().backward()


@pytest.mark.parametrize("chunk_size", [None, 3, 1000], ids=["full logits", "chunks of 3", "one chunk"])
def test_token_statistics_match_a_row_by_row_reference(chunk_size):
    """entropy, top1, mean_logit and log_sum_p2 of each row, against a float64 loop written from their definitions;
    asking for them leaves the logprobs and their gradient as they were, to the bit."""
    from lit_rlhf.ops.logprobs import TOKEN_STATISTICS, chunked_logprobs_and_statistics, logprobs_and_statistics

    torch.manual_seed(3)
    hidden = torch.randn(11, 8, requires_grad=True)
    head = torch.nn.Linear(8, 13)
    tokens = torch.randint(0, 13, (11,))
    tokens[:4] = head(hidden[:4]).argmax(-1)  # rows where the target is the most likely token
    temperature = 0.7

    def compute(statistics):
        if chunk_size is None:
            logprobs, values = logprobs_and_statistics(head(hidden), tokens, temperature, statistics)
        else:
            logprobs, values = chunked_logprobs_and_statistics(hidden, head, tokens, temperature, chunk_size,
                                                               statistics=statistics)
        return logprobs, torch.autograd.grad(logprobs.sum(), hidden)[0], values

    logprobs, grad, values = compute(TOKEN_STATISTICS)
    alone, alone_grad, nothing = compute(())
    assert torch.equal(logprobs, alone) and torch.equal(grad, alone_grad) and nothing == {}
    assert not any(value.requires_grad for value in values.values())
    logits = head(hidden).detach().double()
    for row in range(len(tokens)):
        scaled = [float(x) / temperature for x in logits[row]]
        peak = max(scaled)
        z = sum(math.exp(x - peak) for x in scaled)
        p = [math.exp(x - peak) / z for x in scaled]
        expected = {"entropy": -sum(q * math.log(q) for q in p),
                    "top1": float(max(range(13), key=lambda v: float(logits[row, v])) == int(tokens[row])),
                    "mean_logit": sum(scaled) / 13, "log_sum_p2": math.log(sum(q * q for q in p))}
        for name, value in expected.items():
            assert float(values[name][row]) == pytest.approx(value, abs=1e-5), (name, row)
    assert values["top1"][:4].tolist() == [1.0] * 4 and values["top1"].sum() < 11
