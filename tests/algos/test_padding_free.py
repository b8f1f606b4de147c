"""Padding-free, chunked logprobs against the padded full-logits forward: left-padded prompts of mixed lengths,
responses of mixed lengths, values and gradients."""

import torch
from transformers import AutoModelForCausalLM

from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.models.forwards import response_logprobs_and_entropy
from lit_rlhf.models.packing import pack

PAD = 1


def batch():
    gen = torch.Generator().manual_seed(0)
    n, p, r = 6, 5, 7
    queries = torch.randint(3, 900, (n, p), generator=gen)
    query_mask = torch.ones(n, p, dtype=torch.long)
    for i, pad in enumerate([0, 2, 4, 1, 0, 3]):  # left padding of mixed widths
        query_mask[i, :pad] = 0
        queries[i, :pad] = PAD
    responses = torch.randint(3, 900, (n, r), generator=gen)
    lengths = torch.tensor([7, 1, 3, 5, 2, 7])  # responses of mixed lengths
    response_mask = torch.arange(r).unsqueeze(0) < lengths.unsqueeze(1)
    responses = responses.masked_fill(~response_mask, PAD)
    return queries, query_mask, responses, response_mask


def test_packing_keeps_every_real_token_once_and_no_pad_between_sequences():
    queries, query_mask, responses, response_mask = batch()
    packed = pack(queries, query_mask, responses, response_mask, PAD)
    real_tokens = int(query_mask.sum() + response_mask.sum())
    assert int((packed.input_ids != PAD).sum()) == real_tokens
    assert packed.input_ids.shape[1] == max(int(query_mask[i].sum() + response_mask[i].sum()) for i in range(6))
    assert packed.input_ids.numel() < queries.numel() + responses.numel()  # fewer positions than the padded batch
    assert len(packed.rows) == int(response_mask.sum())


def test_padding_free_chunked_logprobs_equal_the_padded_ones_with_gradients():
    """In float64: the paths sum the same terms in other orders (the embedding's gradient gathers every position's),
    which float32 rounds apart by ~1e-6 of the largest gradient, a margin that moves with the kernels a
    transformers or torch release picks; float64 leaves only ~1e-13, so the tolerances below are 1e-9 and a real
    difference (a token dropped or counted twice, a wrong position) still shows at full size."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA, dtype=torch.float64)
    inputs = batch()
    weights = torch.randn(inputs[2].shape, dtype=torch.float64)

    def run(chunk_size, pad):
        model.zero_grad()
        logprobs, entropy = response_logprobs_and_entropy(model, *inputs, 0.7, chunk_size, pad)
        (logprobs * weights).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return logprobs.detach(), entropy, grads

    padded, padded_entropy, padded_grads = run(None, None)
    for chunk_size, pad in ((4, None), (4, PAD), (1000, PAD)):
        logprobs, entropy, grads = run(chunk_size, pad)
        torch.testing.assert_close(logprobs, padded, atol=1e-9, rtol=0)
        torch.testing.assert_close(entropy, padded_entropy, atol=1e-9, rtol=0)
        assert grads.keys() == padded_grads.keys()
        for name in grads:
            torch.testing.assert_close(grads[name], padded_grads[name], atol=1e-9, rtol=1e-9, msg=name)
    assert (padded[~inputs[3]] == 0).all()  # nothing after the stop token
