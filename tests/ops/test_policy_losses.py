"""GSPO's sequence ratio, LUSPO, CISPO, SAPO and VESPO against hand-computed values and TRL's formulas."""

import math

import pytest
import torch

from lit_rlhf.ops.losses import LossShare, PolicyLoss, clipped_policy_loss
from lit_rlhf.ops.policy_losses import cispo_loss, clip_loss, sapo_loss, sequence_log_ratio


def test_gspo_clips_a_sequence_as_a_whole():
    old = torch.zeros(2, 3)
    logprobs = torch.tensor([[0.1, -0.2, 0.4], [1e-4, -1e-4, 5.0]], requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    log_ratio = sequence_log_ratio(logprobs, old, mask)
    torch.testing.assert_close(log_ratio.detach(), torch.tensor([[0.1] * 3, [0.0] * 3]), atol=1e-7, rtol=0)
    advantages = torch.tensor([[1.0] * 3, [-2.0] * 3])
    per_token = clip_loss(log_ratio.exp(), advantages, 3e-4, 4e-4)
    # sequence 0: ratio e^0.1 = 1.105 > 1 + 4e-4 with A > 0: clipped to -1.0004, no gradient to any of its tokens
    assert per_token[0].detach().tolist() == pytest.approx([-1.0004] * 3)
    (per_token * mask).sum().backward()
    # sequence 1: ratio 1, loss -A s on each of its 2 tokens = 2 x 2 s, s = exp(mean of 2 log ratios): each token 2
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.0, 0.0, 0.0], [2.0, 2.0, 0.0]]))


def test_luspo_is_trls_length_scaled_gspo_loss():
    """TRL's loss_type="luspo" with importance_sampling_level="sequence", written as its trainer computes it: the
    (B,1) sequence loss times the sequence's length, averaged over sequences; here the same number and gradient
    from the per-token loss and loss_type=luspo."""
    gen = torch.Generator().manual_seed(4)
    old = -torch.rand(4, 6, generator=gen)
    logprobs = (old + 0.3 * torch.randn(4, 6, generator=gen)).requires_grad_()
    advantages = torch.tensor([[1.0], [-0.5], [2.0], [-1.0]])
    mask = torch.arange(6).unsqueeze(0) < torch.tensor([[6], [2], [5], [1]])
    loss, _ = clipped_policy_loss(logprobs, old, advantages.expand(4, 6), mask, 0.2, share=LossShare("luspo"),
                                  loss=PolicyLoss(level="sequence"))
    log_weights = ((logprobs - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # TRL's from here
    coef_1 = torch.exp(log_weights.unsqueeze(-1))  # B,1
    coef_2 = torch.clamp(coef_1, 1 - 0.2, 1 + 0.2)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)  # B,1
    trl = (per_token_loss * mask.sum(1, keepdim=True)).mean()
    torch.testing.assert_close(loss, trl)
    grad, trl_grad = (torch.autograd.grad(value, logprobs)[0] for value in (loss, trl))
    torch.testing.assert_close(grad, trl_grad)
    assert (grad[mask] != 0).any()
    grpo, _ = clipped_policy_loss(logprobs, old, advantages.expand(4, 6), mask, 0.2, share=LossShare("grpo"),
                                  loss=PolicyLoss(level="sequence"))
    assert not torch.allclose(grpo, loss)  # GSPO's own mean over sequences weighs them alike


def test_cispo_keeps_the_gradient_of_a_token_the_clip_would_drop():
    logprobs = torch.tensor([[-1.0]], requires_grad=True)
    old, advantages = torch.tensor([[-1.5]]), torch.tensor([[2.0]])
    ratio = (logprobs - old).exp()  # e^0.5 = 1.6487
    cispo_loss(ratio, advantages, logprobs, cap=5.0).sum().backward()
    assert logprobs.grad.item() == pytest.approx(-math.exp(0.5) * 2.0)  # -sg(r) A d(log pi)
    logprobs.grad = None
    cispo_loss((logprobs - old).exp(), advantages, logprobs, cap=1.2).sum().backward()
    assert logprobs.grad.item() == pytest.approx(-1.2 * 2.0)  # weight capped, gradient kept
    logprobs.grad = None
    clip_loss((logprobs - old).exp(), advantages, 0.2, 0.2).sum().backward()
    assert logprobs.grad.item() == 0.0  # PPO's clip drops it


def test_sapo_gate_by_hand_and_the_surrogate_gradient_at_ratio_one():
    def sigmoid(x):
        return 1 / (1 + math.exp(-x))

    for log_ratio, advantage, tau in ((0.5, 2.0, 1.0), (0.5, -2.0, 1.05), (0.0, 3.0, 1.0), (-0.3, -1.0, 1.05)):
        logprobs = torch.tensor([[log_ratio]], requires_grad=True)
        loss = sapo_loss(logprobs.exp(), torch.tensor([[advantage]]), tau_pos=1.0, tau_neg=1.05)
        loss.sum().backward()
        r = math.exp(log_ratio)
        s = sigmoid(tau * (r - 1))
        assert loss.item() == pytest.approx(-advantage * s * 4 / tau)
        assert logprobs.grad.item() == pytest.approx(-advantage * 4 * s * (1 - s) * r)  # dg/dr = 4 s (1 - s)
    logprobs = torch.zeros(1, 1, requires_grad=True)
    sapo_loss(logprobs.exp(), torch.tensor([[3.0]]), 1.0, 1.05).sum().backward()
    assert logprobs.grad.item() == pytest.approx(-3.0)  # the surrogate's -A at ratio 1


@pytest.mark.parametrize("kind", ["clip", "cispo", "sapo"])
def test_each_policy_loss_through_the_aggregated_loss(kind):
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 5, generator=gen)
    logprobs = (old + 0.3 * torch.randn(4, 5, generator=gen)).requires_grad_()
    advantages = torch.randn(4, 1, generator=gen).expand(4, 5)
    mask = torch.arange(5).unsqueeze(0) < torch.tensor([[5], [3], [4], [1]])
    loss, stats = clipped_policy_loss(logprobs, old, advantages, mask, 0.2, 0.2, LossShare("dapo", step_tokens=13.0),
                                      loss=PolicyLoss(kind, cispo_cap=1.1))
    ratio = (logprobs - old).exp()
    per_token = {"clip": lambda: clip_loss(ratio, advantages, 0.2, 0.2),
                 "cispo": lambda: cispo_loss(ratio, advantages, logprobs, 1.1),
                 "sapo": lambda: sapo_loss(ratio, advantages, 1.0, 1.05)}[kind]()
    torch.testing.assert_close(loss, (per_token * mask).sum() / 13.0)
    assert 0 <= stats["clipfrac"].item() <= 1


def test_clip_ratios_count_sequences_under_gspo_and_positive_advantages_under_cispo_as_trl():
    """TRL: a sequence ratio's clip indicator counts once per sequence (not once per token), and cispo_clip_ratio
    counts capped weights of positive advantages only."""
    from lit_rlhf.ops import clipped_policy_loss
    from lit_rlhf.ops.losses import PolicyLoss

    old = torch.zeros(3, 4)
    # sequence mean log-ratios: 0.5 (clipped above, 4 tokens), 0.0 (inside, 1 token), -0.5 (clipped below, 2 tokens)
    new = torch.tensor([[0.5] * 4, [0.0] * 4, [-0.5] * 4])
    mask = torch.tensor([[True] * 4, [True, False, False, False], [True, True, False, False]])
    advantages = torch.tensor([[1.0] * 4, [1.0] * 4, [-1.0] * 4])
    _, stats = clipped_policy_loss(new, old, advantages, mask, 3e-4, 4e-4, loss=PolicyLoss(level="sequence"))
    assert stats["clip_high"].item() == pytest.approx(1 / 3) and stats["clip_low"].item() == pytest.approx(1 / 3)
    assert stats["clip_region"].item() == pytest.approx(2 / 3)  # per token it would be (4 + 2) / 7
    # a row without response tokens counts as a sequence that was not clipped, as TRL averages over every row
    no_tokens = torch.zeros(1, 4, dtype=torch.bool)
    _, stats = clipped_policy_loss(torch.cat([new, torch.zeros(1, 4)]), torch.zeros(4, 4),
                                   torch.cat([advantages, torch.ones(1, 4)]), torch.cat([mask, no_tokens]),
                                   3e-4, 4e-4, loss=PolicyLoss(level="sequence"))
    assert stats["clip_high"].item() == pytest.approx(1 / 4) and stats["clip_region"].item() == pytest.approx(2 / 4)
    # CISPO: ratios e^2 = 7.4 above the cap 5 for a positive and for a negative advantage; only the first counts
    new = torch.tensor([[2.0] * 4, [2.0] * 4, [0.0] * 4])
    advantages = torch.tensor([[1.0] * 4, [-1.0] * 4, [1.0] * 4])
    full = torch.ones(3, 4, dtype=torch.bool)
    _, stats = clipped_policy_loss(new, old, advantages, full, 0.2, 0.2, loss=PolicyLoss(kind="cispo", cispo_cap=5.0))
    assert stats["clip_high"].item() == pytest.approx(1 / 3)


def test_delta_caps_the_unclipped_ratio_of_negative_advantages_by_hand():
    """INTELLECT-2's two-sided clip (TRL's delta): -min(min(r, delta) A, clip(r) A), here at eps 0.2, delta 2."""
    # log-ratios giving r = e^1 = 2.718 (above delta), e^0.5 = 1.649 (between 1 + eps and delta), e^0 = 1
    log_ratio = torch.tensor([[1.0, 0.5, 0.0], [1.0, 0.5, 0.0]], requires_grad=True)
    advantages = torch.tensor([[-1.5] * 3, [2.0] * 3])
    per_token = clip_loss(log_ratio.exp(), advantages, 0.2, 0.2, delta=2.0)
    per_token.sum().backward()
    e1, e05 = math.exp(1.0), math.exp(0.5)
    # A < 0: without delta the loss would be -A r = 1.5 e (growing with r); with it 1.5 x 2, and no gradient
    assert per_token[0].tolist() == pytest.approx([3.0, 1.5 * e05, 1.5])
    assert log_ratio.grad[0].tolist() == pytest.approx([0.0, 1.5 * e05, 1.5])  # d(-A r)/d log r = -A r
    # A > 0: delta changes nothing (the clip at 1 + eps binds first)
    assert per_token[1].tolist() == pytest.approx([-2.0 * 1.2, -2.0 * 1.2, -2.0])
    assert log_ratio.grad[1].tolist() == pytest.approx([0.0, 0.0, -2.0])
    unbounded = clip_loss(log_ratio.exp(), advantages, 0.2, 0.2)
    assert unbounded[0, 0].item() == pytest.approx(1.5 * e1)


def test_delta_through_the_aggregated_loss_is_trls_formula_and_clipfrac_counts_the_capped_tokens():
    gen = torch.Generator().manual_seed(1)
    old = -torch.rand(4, 6, generator=gen)
    logprobs = (old + torch.randn(4, 6, generator=gen)).requires_grad_()  # ratios well beyond delta
    advantages = torch.tensor([[-1.0], [0.5], [-2.0], [1.0]]).expand(4, 6)
    mask = torch.arange(6).unsqueeze(0) < torch.tensor([[6], [4], [5], [2]])
    loss, stats = clipped_policy_loss(logprobs, old, advantages, mask, 0.2, 0.28, LossShare("dapo", step_tokens=17.0),
                                      loss=PolicyLoss(delta=1.5))
    # TRL's GRPO loss, written as its trainer does: coef_2 from the unclamped ratio, then coef_1 clamped at delta
    coef_1 = torch.exp(logprobs - old)
    coef_2 = torch.clamp(coef_1, 1 - 0.2, 1 + 0.28)
    coef_1 = torch.clamp(coef_1, max=1.5)
    trl = -torch.min(coef_1 * advantages, coef_2 * advantages)
    torch.testing.assert_close(loss, (trl * mask).sum() / 17.0)
    ratio = (logprobs - old).exp().detach()
    capped = (ratio > 1.5) & (advantages < 0)
    clipped = ((ratio < 0.8) & (advantages < 0)) | ((ratio > 1.28) & (advantages > 0))
    assert capped[mask].any()
    assert stats["clipfrac"].item() == pytest.approx((clipped | capped)[mask].float().mean().item())
    assert stats["clip_region"].item() == pytest.approx(clipped[mask].float().mean().item())  # TRL's


def test_vespo_weights_are_trls_gamma_weights_by_hand():
    """phi(w) = exp(lambda + k log w - lambda w), w = exp of the sequence's summed token log-ratios (masked), times
    the engine's per-token weights folded in; (k, lambda) by the advantage's sign; 1 at w = 1."""
    from lit_rlhf.ops.policy_losses import vespo_weights

    old = torch.zeros(3, 3)
    logprobs = torch.tensor([[0.1, 0.2, 9.0], [-0.3, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, True], [True, False, False]])
    advantages = torch.tensor([[1.0] * 3, [-0.5] * 3, [0.0] * 3])
    engine = torch.tensor([[1.0, 1.0, 0.0], [math.exp(0.1), 1.0, 1.0], [1.0, 0.0, 0.0]])  # 0 off the response

    def phi(log_w, k, lam):
        return math.exp(lam + k * log_w - lam * math.exp(log_w))

    weights = vespo_weights(logprobs, old, mask, advantages, engine, 2.0, 3.0, 3.0, 2.0)
    expected = [phi(0.3, 2.0, 3.0), phi(-0.2, 3.0, 2.0), 1.0]  # row 1: -0.3 + 0.1 from the engine; row 2: w = 1
    for row, value in enumerate(expected):
        assert weights[row].tolist() == pytest.approx([value] * 3, rel=1e-5)
    # a sequence whose ratio overflows: log w clamped to 20, phi = exp(3 + 40 - 3 e^20) = 0, not NaN
    huge = vespo_weights(torch.full((1, 2), 30.0), torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool),
                         torch.ones(1, 2), None, 2.0, 3.0, 3.0, 2.0)
    assert huge.tolist() == [[0.0, 0.0]]


def test_vespo_through_the_aggregated_loss_weighs_each_token_log_prob_gradient_by_phi():
    """-sg(phi) A log pi summed over the step's tokens (dapo): the gradient is -phi A / tokens on each token."""
    from lit_rlhf.ops.policy_losses import vespo_weights

    gen = torch.Generator().manual_seed(1)
    old = -torch.rand(3, 4, generator=gen)
    logprobs = (old + 0.2 * torch.randn(3, 4, generator=gen)).requires_grad_()
    advantages = torch.tensor([[1.5], [-1.0], [0.5]]).expand(3, 4)
    mask = torch.arange(4).unsqueeze(0) < torch.tensor([[4], [2], [3]])
    phi = vespo_weights(logprobs, old, mask, advantages, None, 2.0, 3.0, 3.0, 2.0)
    assert not phi.requires_grad and (phi != 1).all()
    loss, stats = clipped_policy_loss(logprobs, old, advantages, mask, 0.2, 0.2, LossShare("dapo", step_tokens=9.0),
                                      is_weights=phi, loss=PolicyLoss("vespo"))
    loss.backward()
    torch.testing.assert_close(logprobs.grad, -phi * advantages * mask / 9.0)
    assert stats["clip_low"] == 0 and stats["clip_high"] == 0
