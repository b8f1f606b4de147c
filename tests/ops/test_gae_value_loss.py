import pytest
import torch

from lit_rlhf.ops import clipped_value_loss, gae_advantages
from tests.gae_reference import gae_reverse_loop


@pytest.mark.parametrize("gamma, lam", [(1.0, 0.95), (0.99, 0.9), (1.0, 1.0), (0.9, 0.0)])
def test_gae_matches_a_reverse_loop_on_random_masked_inputs(gamma, lam):
    torch.manual_seed(0)
    n, r = 6, 9
    rewards, values = torch.randn(n, r), torch.randn(n, r)
    lengths = torch.tensor([9, 1, 5, 3, 8, 2])
    mask = torch.arange(r).unsqueeze(0) < lengths.unsqueeze(1)
    # garbage past the stop token must not leak in
    rewards, values = rewards.masked_fill(~mask, 100.0), values.masked_fill(~mask, -100.0)
    expected = gae_reverse_loop(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(gae_advantages(rewards, values, mask, gamma, lam), expected, atol=1e-5, rtol=1e-5)


def test_gae_with_lam_one_and_gamma_one_is_return_minus_value():
    rewards = torch.tensor([[0.0, -0.1, 2.0]])
    values = torch.tensor([[0.5, 0.2, 1.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    returns = torch.tensor([[1.9, 1.9, 2.0]])
    torch.testing.assert_close(gae_advantages(rewards, values, mask, 1.0, 1.0), returns - values)


def test_clipped_value_loss_against_hand_values():
    values = torch.tensor([[1.0, 1.0, 1.0, 1.0]])  # at rollout
    vpred = torch.tensor([[1.5, 1.1, 0.5, 9.0]])
    returns = torch.tensor([[2.0, 0.0, 0.0, 5.0]])
    mask = torch.tensor([[True, True, True, False]])
    loss, stats = clipped_value_loss(vpred, values, returns, mask, cliprange_value=0.2)
    clipfrac = stats["clipfrac"]
    # token 0: unclipped (1.5-2)^2=.25, clipped (1.2-2)^2=.64 -> .64 (clipped counts)
    # token 1: unclipped 1.21, clipped (1.1)^2=1.21 -> equal, not counted as clipped
    # token 2: unclipped .25, clipped (0.8)^2=.64 -> .64 (clipped counts)
    assert loss.item() == pytest.approx(0.5 * (0.64 + 1.21 + 0.64) / 3)
    assert clipfrac.item() == pytest.approx(2 / 3)
