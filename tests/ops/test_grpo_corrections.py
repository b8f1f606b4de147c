"""GRPO's KL bias correction and zero-std groups, against hand-computed values."""

import math

import pytest
import torch

from lit_rlhf.estimators import EstimatorInputs, group_relative
from lit_rlhf.ops import bias_corrected_kl, group_all_equal, kl_per_token


def kl_gradient(corrected: bool) -> tuple[float, float]:
    logprobs = torch.tensor([-1.0], requires_grad=True)
    old, ref = torch.tensor([-1.0]), torch.tensor([-1.5])
    kl = kl_per_token(logprobs, ref, "k3")
    if corrected:
        kl = bias_corrected_kl(kl, logprobs, old)
    kl.sum().backward()
    return kl.item(), logprobs.grad.item()


def test_one_token_kl_gradient_plain_and_bias_corrected_by_hand():
    # k3 = exp(ref - logp) - (ref - logp) - 1 = e^-0.5 + 0.5 - 1; d/dlogp = 1 - e^-0.5
    value, plain = kl_gradient(corrected=False)
    assert value == pytest.approx(math.exp(-0.5) - 0.5, abs=1e-7)
    assert plain == pytest.approx(1 - math.exp(-0.5), abs=1e-7)  # 0.3935
    # x ratio (= 1 here, gradient 1): k3 + dk3 = e^-0.5 - 0.5 + 1 - e^-0.5 = 0.5
    value, corrected = kl_gradient(corrected=True)
    assert value == pytest.approx(math.exp(-0.5) - 0.5, abs=1e-7)
    assert corrected == pytest.approx(0.5, abs=1e-7)


def test_the_corrected_gradient_is_the_reverse_kl_gradient_in_expectation():
    """Over a 3-token vocabulary sampled from pi_old = pi: E[grad (ratio x k3)] = grad KL(pi || ref) exactly."""
    logits = torch.tensor([0.3, -0.2, 0.5], requires_grad=True)
    ref = torch.log_softmax(torch.tensor([0.0, 0.4, -0.3]), 0)
    logp = torch.log_softmax(logits, 0)
    probs = logp.exp().detach()
    expected = (probs * bias_corrected_kl(kl_per_token(logp, ref, "k3"), logp, logp.detach())).sum()
    (estimated,) = torch.autograd.grad(expected, logits, retain_graph=True)
    (exact,) = torch.autograd.grad((logp.exp() * (logp - ref)).sum(), logits)
    torch.testing.assert_close(estimated, exact)


@pytest.mark.parametrize("value", [0.7, 0.3, 1 / 3, 0.1])
def test_a_group_of_equal_float32_rewards_is_detected_and_gets_exactly_zero_advantages(value):
    scores = torch.tensor([value] * 8 + [0.1, 0.9, 0.4, 0.2, 0.3, 0.8, 0.5, 0.6], dtype=torch.float32)  # N=16
    prompt_index = torch.arange(2).repeat_interleave(8)
    if value == 0.7:  # what `group_std == 0` missed: the computed std of eight equal values is not 0
        assert scores[:8].std() > 0
    assert group_all_equal(scores, prompt_index).tolist() == [True] * 8 + [False] * 8
    mask = torch.ones(16, 3, dtype=torch.bool)
    inputs = EstimatorInputs(scores, torch.zeros(16, 3), mask, prompt_index, None, lambda t: t)
    for scale in ("group", "batch", "none"):
        advantages = group_relative(inputs, type("S", (), {"scale_rewards": scale})()).advantages
        assert (advantages[:8] == 0).all()
        assert (advantages[8:] != 0).any()


def test_the_bias_corrected_kl_of_gspo_weights_by_the_sequence_ratio_as_trl():
    """TRL multiplies the per-token k3 by coef_1, the loss's ratio: per sequence under GSPO, exp of the mean token
    log-ratio (with its gradient), the same for every token of the sequence."""
    logprobs = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -9.0]], requires_grad=True)
    old = torch.tensor([[-1.2, -1.5, -0.5], [-0.3, -0.2, -1.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    corrected = bias_corrected_kl(kl, logprobs, old, mask)
    ratios = [math.exp((0.2 - 0.5 + 0.0) / 3), math.exp((0.0 - 0.5) / 2)]  # mean log-ratio over the response
    for i in range(2):
        for t in range(3):
            assert corrected[i, t].item() == pytest.approx(kl[i, t].item() * ratios[i], rel=1e-6)
    corrected[0].sum().backward()  # d/dlogp_t of (sum kl) x exp(mean log-ratio) = (sum kl) x ratio / 3 per token
    expected = 0.6 * ratios[0] / 3
    assert logprobs.grad[0].tolist() == pytest.approx([expected] * 3, rel=1e-5)
    per_token = bias_corrected_kl(kl, logprobs.detach(), old)  # the token level: each token's own ratio
    assert per_token[0, 0].item() == pytest.approx(0.1 * math.exp(0.2), rel=1e-6)
