import math

import pytest
import torch

from lit_rlhf.ops import clipped_policy_loss


def test_clipped_loss_against_hand_values():
    old = torch.zeros(1, 4)
    # ratios 1.0, 1.5 (clipped to 1.2 for A>0), 0.5 (A>0: unclipped is the max), 1.5 (A<0: unclipped)
    new = torch.log(torch.tensor([[1.0, 1.5, 0.5, 1.5]]))
    advantages = torch.tensor([[2.0, 1.0, 1.0, -1.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    loss, stats = clipped_policy_loss(new, old, advantages, mask, 0.2)
    per_token = [-2.0 * 1.0, -1.0 * 1.2, -1.0 * 0.5, 1.0 * 1.5]
    assert loss.item() == pytest.approx(sum(per_token) / 4)
    assert stats["clipfrac"].item() == pytest.approx(1 / 4)
    assert stats["ratio"].item() == pytest.approx((1 + 1.5 + 0.5 + 1.5) / 4)
    logdiff = [0.0, math.log(1.5), math.log(0.5), math.log(1.5)]
    assert stats["approxkl"].item() == pytest.approx(0.5 * sum(d * d for d in logdiff) / 4)


def test_masked_tokens_do_not_count_and_gradient_is_reinforce_at_ratio_one():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    advantages = torch.tensor([[1.0, 1.0, 99.0]])
    mask = torch.tensor([[True, True, False]])
    loss, _ = clipped_policy_loss(logprobs, logprobs.detach(), advantages, mask, 0.2)
    loss.backward()
    assert loss.item() == pytest.approx(-1.0)
    assert logprobs.grad.tolist() == [[-0.5, -0.5, 0.0]]
