"""Truncated importance sampling for a rollout engine's sampler/trainer mismatch, against hand values."""

import math

import pytest
import torch

from lit_rlhf.ops import clipped_policy_loss, sampler_mismatch_stats, truncated_is_weights


def test_weights_are_the_ratio_of_trainer_to_sampler_capped():
    old = torch.log(torch.tensor([[0.5, 0.2, 0.9]]))
    sampler = torch.log(torch.tensor([[0.25, 0.4, 0.3]]))
    weights = truncated_is_weights(old, sampler, cap=2.0)
    assert weights[0].tolist() == pytest.approx([2.0, 0.5, 2.0])  # 2.0, 0.5, 3.0 capped at 2
    assert not weights.requires_grad


def test_mismatch_statistics_by_hand():
    old = torch.tensor([[-1.0, -2.0, -0.5, 9.0]])
    sampler = torch.tensor([[-1.5, -1.0, -0.5, 0.0]])  # the last token is masked out: its 9.0 must not count
    mask = torch.tensor([[True, True, True, False]])
    stats = sampler_mismatch_stats(old, sampler, mask, cap=1.5)
    assert stats["rollout/logprob_diff_mean"].item() == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert stats["rollout/logprob_diff_max"].item() == pytest.approx(1.0)
    # k3 with samples from the sampler: log r = old - sampler; (r - 1) - log r per token
    k3 = [(math.exp(d) - 1) - d for d in (0.5, -1.0, 0.0)]
    assert stats["rollout/sampler_kl"].item() == pytest.approx(sum(k3) / 3)
    assert stats["rollout/is_weight_mean"].item() == pytest.approx((1.5 + math.exp(-1.0) + 1.0) / 3)
    assert stats["rollout/is_truncated_frac"].item() == pytest.approx(1 / 3)
    assert "rollout/is_weight_mean" not in sampler_mismatch_stats(old, sampler, mask, cap=None)


def test_weighted_clipped_loss_matches_a_token_by_token_loop():
    torch.manual_seed(0)
    new = torch.randn(3, 5, requires_grad=True)
    old, advantages = torch.randn(3, 5), torch.randn(3, 5)
    weights = torch.rand(3, 5) * 2
    mask = torch.rand(3, 5) > 0.3
    loss, _ = clipped_policy_loss(new, old, advantages, mask, 0.2, 0.28, is_weights=weights)
    expected, count = 0.0, 0
    for i in range(3):
        for t in range(5):
            if mask[i, t]:
                ratio = math.exp(new[i, t].item() - old[i, t].item())
                a = advantages[i, t].item()
                expected += weights[i, t].item() * max(-a * ratio, -a * min(max(ratio, 0.8), 1.28))
                count += 1
    assert loss.item() == pytest.approx(expected / count, rel=1e-5)
    unweighted, _ = clipped_policy_loss(new, old, advantages, mask, 0.2, 0.28)
    assert unweighted.item() != pytest.approx(loss.item())
