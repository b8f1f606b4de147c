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


def test_a_sequence_modes_mean_weight_is_per_sequence_as_trl_logs_it():
    old = torch.tensor([[-1.0, 0.0, 0.0], [-1.0, -1.0, -1.0]])
    sampler = torch.tensor([[-1.5, 0.0, 0.0], [-1.0, -1.1, -1.0]])
    mask = torch.tensor([[True, False, False], [True, True, True]])  # one token, three tokens
    stats = sampler_mismatch_stats(old, sampler, mask, cap=10.0, mode="sequence_truncate")
    # the sequences' weights: exp(0.5), exp(0.1); each counted once (per token: (e^0.5 + 3 e^0.1) / 4)
    assert stats["rollout/is_weight_mean"].item() == pytest.approx((math.exp(0.5) + math.exp(0.1)) / 2)


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


def test_the_correction_modes_by_hand_as_trl_computes_them():
    """TRL 1.16's vllm_importance_sampling_mode: sequence ratios are the product of the token ratios; `*_mask`
    drops only ratios above the cap unless a lower bound (clip_min) is set; `*_truncate` clamps to [min, cap]."""
    from lit_rlhf.ops import importance_weights

    old = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.4, 0.4, 0.1]]))
    sampler = torch.log(torch.tensor([[0.25, 0.4, 0.3], [0.4, 0.1, 0.1]]))
    mask = torch.tensor([[True, True, True], [True, True, False]])
    # token ratios: [2, 0.5, 3], [1, 4, (masked)]
    torch.testing.assert_close(importance_weights(old, sampler, mask, 2.5, "token_truncate"), torch.tensor(
        [[2.0, 0.5, 2.5], [1.0, 2.5, 0.0]]))
    torch.testing.assert_close(importance_weights(old, sampler, mask, 2.5, "token_truncate", lower=0.8), torch.tensor(
        [[2.0, 0.8, 2.5], [1.0, 2.5, 0.0]]))
    torch.testing.assert_close(importance_weights(old, sampler, mask, 2.5, "token_mask"), torch.tensor(
        [[2.0, 0.5, 0.0], [1.0, 0.0, 0.0]]))  # 0.5 stays: no lower bound by default
    torch.testing.assert_close(importance_weights(old, sampler, mask, 2.5, "token_mask", lower=0.6), torch.tensor(
        [[2.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))
    # sequence ratios, products: 2 x 0.5 x 3 = 3; 1 x 4 = 4
    torch.testing.assert_close(importance_weights(old, sampler, mask, 3.5, "sequence_truncate"), torch.tensor(
        [[3.0] * 3, [3.5, 3.5, 0.0]]))
    torch.testing.assert_close(importance_weights(old, sampler, mask, 3.5, "sequence_mask"), torch.tensor(
        [[3.0] * 3, [0.0, 0.0, 0.0]]))
    # the geometric-mean variant: (2 x 0.5 x 3)^(1/3) = 3^(1/3) = 1.442; (1 x 4)^(1/2) = 2
    geo = 3 ** (1 / 3)
    torch.testing.assert_close(importance_weights(old, sampler, mask, 1.8, "sequence_geo_truncate"), torch.tensor(
        [[geo] * 3, [1.8, 1.8, 0.0]]))
    torch.testing.assert_close(importance_weights(old, sampler, mask, 1.8, "sequence_geo_mask"), torch.tensor(
        [[geo] * 3, [0.0, 0.0, 0.0]]))
    stats = sampler_mismatch_stats(old, sampler, mask, 2.5, "token_mask")
    assert stats["rollout/is_masked_frac"].item() == pytest.approx(2 / 5)
    stats = sampler_mismatch_stats(old, sampler, mask, 2.5, "token_truncate", lower=0.8)
    assert stats["rollout/is_truncated_frac"].item() == pytest.approx(3 / 5)  # 0.5 below, 3 and 4 above


def test_sequence_modes_equal_trls_formula_on_random_logprobs():
    """A slow loop with TRL's formula: exp(sum of (old - sampler) over the response), clamped or masked."""
    import math

    from lit_rlhf.ops import importance_weights

    gen = torch.Generator().manual_seed(0)
    old, sampler = -torch.rand(5, 7, generator=gen), -torch.rand(5, 7, generator=gen)
    mask = torch.arange(7).unsqueeze(0) < torch.tensor([7, 3, 1, 5, 6]).unsqueeze(1)
    truncated = importance_weights(old, sampler, mask, 1.5, "sequence_truncate", lower=0.7)
    masked = importance_weights(old, sampler, mask, 1.5, "sequence_mask", lower=0.7)
    for i in range(5):
        ratio = math.exp(sum(float(old[i, t] - sampler[i, t]) for t in range(7) if mask[i, t]))
        for t in range(7):
            expected_truncated = min(max(ratio, 0.7), 1.5) if mask[i, t] else 0.0
            expected_masked = (ratio if 0.7 <= ratio <= 1.5 else 0.0) if mask[i, t] else 0.0
            assert truncated[i, t].item() == pytest.approx(expected_truncated, rel=1e-5)
            assert masked[i, t].item() == pytest.approx(expected_masked, rel=1e-5)


def test_off_policy_sequence_masking_by_hand():
    from lit_rlhf.ops import off_policy_sequences

    policy = torch.zeros(3, 2)
    sampler = torch.tensor([[0.3, 0.1], [0.3, 0.1], [0.01, 0.01]])  # mean log(pi_sampler / pi_theta): 0.2, 0.2, 0.01
    mask = torch.ones(3, 2, dtype=torch.bool)
    advantages = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [-1.0, -1.0]])
    # only a negative advantage AND a KL above 0.1 drops a sequence
    assert off_policy_sequences(policy, sampler, mask, advantages, 0.1).tolist() == [True, False, False]


@pytest.mark.integration
@pytest.mark.parametrize("settings", [{"rollout_is_mode": "token_mask", "rollout_is_cap": 1.05},
                                      {"rollout_is_mode": "sequence_truncate", "rollout_is_cap": 1.01},
                                      {"rollout_is_mode": "sequence_geo_truncate", "rollout_is_cap": 1.01},
                                      {"rollout_is_cap": 3.0, "rollout_is_min": 0.99},
                                      {"off_policy_mask_threshold": 0.0}])
def test_the_corrections_change_the_step_of_an_engine_rollout(settings):
    from tests.algos.fixed_rollout import differs, one_step_delta

    noisy = {"sampler_noise": 0.3}
    assert differs(one_step_delta("grpo", rollout_options=noisy, **settings),
                   one_step_delta("grpo", rollout_options=noisy))


@pytest.mark.integration
def test_off_policy_masking_measures_the_policy_being_updated_in_every_micro_batch():
    """As DeepSeek-V3.2 and TRL: without engine logprobs (rollout=hf) the behaviour policy is pi_old, so the first
    epoch (pi_theta = pi_old) masks nothing and later epochs, once the policy moved, mask negative-advantage
    sequences it drifted from."""
    from tests.algos.fixed_rollout import assert_same, differs, one_step_delta

    assert_same(one_step_delta("grpo", off_policy_mask_threshold=1e-3), one_step_delta("grpo"))
    two_epochs = {"num_ppo_epochs": 2}
    assert differs(one_step_delta("grpo", off_policy_mask_threshold=1e-3, **two_epochs),
                   one_step_delta("grpo", **two_epochs))
