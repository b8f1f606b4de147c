import math

import pytest
import torch

from lit_rlhf.ops import entropy_from_logits, kl_per_token, logprobs_and_entropy, logprobs_from_logits
from lit_rlhf.ops import logprobs as logprobs_module


def test_logprobs_and_entropy_match_a_slow_loop_with_temperature():
    torch.manual_seed(0)
    logits, tokens, temperature = torch.randn(3, 4, 7), torch.randint(0, 7, (3, 4)), 0.7
    fast_lp = logprobs_from_logits(logits, tokens, temperature)
    fast_h = entropy_from_logits(logits, temperature)
    fused_lp, fused_h = logprobs_and_entropy(logits, tokens, temperature)
    for n in range(3):
        for t in range(4):
            z = [math.exp(x / temperature) for x in logits[n, t].tolist()]
            probs = [v / sum(z) for v in z]
            for lp, h in ((fast_lp, fast_h), (fused_lp, fused_h)):
                assert lp[n, t].item() == pytest.approx(math.log(probs[tokens[n, t]]), abs=1e-5)
                assert h[n, t].item() == pytest.approx(-sum(p * math.log(p) for p in probs), abs=1e-5)


def test_the_entropy_in_blocks_of_rows_matches_a_slow_loop_and_hand_values(monkeypatch):
    """Blocks of 3 rows of 7 entries over 5 x 2 positions: 4 blocks, the last one short."""
    monkeypatch.setattr(logprobs_module, "ENTROPY_BLOCK_ELEMENTS", 21)
    torch.manual_seed(1)
    log_probs = torch.log_softmax(torch.randn(5, 2, 7), -1)
    log_probs[0, 0] = math.log(1 / 7)  # uniform: log 7
    log_probs[0, 1] = torch.tensor([1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 64]).log()  # 1.96875 bits
    entropy = logprobs_module.entropy_from_log_probs(log_probs)
    assert entropy.shape == (5, 2)
    assert entropy[0, 0].item() == pytest.approx(math.log(7), abs=1e-6)
    assert entropy[0, 1].item() == pytest.approx(1.96875 * math.log(2), abs=1e-6)
    for n in range(1, 5):
        for t in range(2):
            probs = log_probs[n, t].exp().tolist()
            assert entropy[n, t].item() == pytest.approx(-sum(p * math.log(p) for p in probs), abs=1e-6)
    assert logprobs_module.entropy_from_log_probs(log_probs[:0]).shape == (0, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # under bf16-mixed the entropy stays float32
        assert logprobs_module.entropy_from_log_probs(log_probs).dtype == torch.float32


def test_fused_logprobs_carry_the_gradient_of_the_separate_computation_and_entropy_none():
    logits = torch.randn(2, 3, 5, requires_grad=True)
    tokens = torch.randint(0, 5, (2, 3))
    fused_lp, fused_h = logprobs_and_entropy(logits, tokens, 0.7)
    assert not fused_h.requires_grad
    (grad_fused,) = torch.autograd.grad(fused_lp.sum(), logits)
    (grad_separate,) = torch.autograd.grad(logprobs_from_logits(logits, tokens, 0.7).sum(), logits)
    torch.testing.assert_close(grad_fused, grad_separate)


def test_kl_estimators_against_hand_values():
    logprobs, ref_logprobs = torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]])
    # log r = log(0.25 / 0.5) = -log 2
    assert kl_per_token(logprobs, ref_logprobs, "k1").item() == pytest.approx(math.log(2))
    assert kl_per_token(logprobs, ref_logprobs, "k2").item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert kl_per_token(logprobs, ref_logprobs, "k3").item() == pytest.approx(0.5 - 1 + math.log(2))


def test_kl_is_exactly_zero_for_equal_logprobs_and_unknown_estimator_is_refused():
    lp = torch.randn(2, 5)
    for estimator in ("k1", "k2", "k3"):
        assert torch.equal(kl_per_token(lp, lp.clone(), estimator), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="k4"):
        kl_per_token(lp, lp, "k4")
