"""GRPO's and REINFORCE++'s estimators, the loss types and clip-higher, against hand values and slow loops."""

import math
from types import SimpleNamespace

import pytest
import torch

from lit_rlhf.estimators import ESTIMATORS, EstimatorInputs
from lit_rlhf.ops import (
    LossShare,
    aggregate_loss,
    clipped_policy_loss,
    global_masked_whiten,
    group_all_equal,
    group_mean,
    group_normalized_sum,
    group_std,
    masked_whiten,
    overlong_penalty,
)


def slow_group_stats(values, prompt_index):
    means, stds = [], []
    for i in range(len(values)):
        group = [float(values[j]) for j in range(len(values)) if prompt_index[j] == prompt_index[i]]
        mean = sum(group) / len(group)
        means.append(mean)
        stds.append(math.sqrt(sum((g - mean) ** 2 for g in group) / (len(group) - 1)))
    return torch.tensor(means), torch.tensor(stds)


def test_group_mean_and_std_match_a_loop_in_any_layout():
    torch.manual_seed(0)
    values = torch.randn(12)
    prompt_index = torch.tensor([2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1])  # shuffled, K=4
    means, stds = slow_group_stats(values, prompt_index)
    torch.testing.assert_close(group_mean(values, prompt_index), means)
    torch.testing.assert_close(group_std(values, prompt_index), stds)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_relative_advantages_by_a_slow_loop(scale):
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 2.0, -1.0])
    prompt_index = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    mask = torch.tensor([[1, 1, 0]] * 8, dtype=torch.bool)
    estimate = ESTIMATORS["group"](EstimatorInputs(scores, torch.zeros(8, 3), mask, prompt_index),
                                   SimpleNamespace(scale_rewards=scale))
    means, stds = slow_group_stats(scores, prompt_index)
    batch_std = float(torch.tensor(scores.tolist()).std())
    for i in range(8):
        expected = float(scores[i]) - float(means[i])
        if scale == "group":
            expected /= float(stds[i]) + 1e-4
        elif scale == "batch":
            expected /= batch_std + 1e-4
        assert estimate.advantages[i].tolist() == pytest.approx([expected, expected, 0.0], abs=1e-6)
    # by hand: group 0 has mean 0.5 and std sqrt(1/3); the first sample's advantage
    if scale == "group":
        assert float(estimate.advantages[0, 0]) == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-4), abs=1e-6)


def test_group_relative_puts_the_kl_in_the_reward_when_asked():
    scores, penalty = torch.tensor([1.0, 0.0]), torch.tensor([[-0.5, -0.5], [0.0, 0.0]])
    mask = torch.ones(2, 2, dtype=torch.bool)
    estimate = ESTIMATORS["group"](EstimatorInputs(scores, penalty, mask, torch.tensor([0, 0])),
                                   SimpleNamespace(scale_rewards="none"))
    assert estimate.rlhf_reward.tolist() == [0.0, 0.0]  # 1 - 0.5 - 0.5 and 0: no advantage left
    assert estimate.advantages.abs().max() == 0


def slow_reinforce_pp(scores, penalty, mask, prompt_index, baseline, reward_clamp=None):
    n, r = mask.shape
    if baseline == "group":
        means, _ = slow_group_stats(scores, prompt_index)
        scores = scores - means
    if reward_clamp is not None:
        scores = torch.tensor([min(max(float(s), -reward_clamp), reward_clamp) for s in scores])
    returns = torch.zeros(n, r)
    for i in range(n):
        last = int(mask[i].sum()) - 1
        running = 0.0
        for t in range(last, -1, -1):
            running += float(penalty[i, t]) + (float(scores[i]) if t == last else 0.0)
            returns[i, t] = running
    values = [float(returns[i, t]) for i in range(n) for t in range(r) if mask[i, t]]
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return torch.tensor([[(float(returns[i, t]) - mean) / std if mask[i, t] else 0.0 for t in range(r)]
                         for i in range(n)])


@pytest.mark.parametrize("baseline", ["none", "group"])
def test_reinforce_plus_plus_by_a_slow_loop(baseline):
    torch.manual_seed(1)
    scores = torch.randn(6)
    prompt_index = torch.tensor([0, 1, 2, 0, 1, 2])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]]).bool()
    penalty = -0.1 * torch.rand(6, 4) * mask
    estimate = ESTIMATORS["reinforce_pp"](EstimatorInputs(scores, penalty, mask, prompt_index),
                                          SimpleNamespace(baseline=baseline))
    torch.testing.assert_close(estimate.advantages, slow_reinforce_pp(scores, penalty, mask, prompt_index, baseline),
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(estimate.rlhf_reward, scores + penalty.sum(1))


@pytest.mark.parametrize("baseline", ["none", "group"])
def test_reinforce_plus_plus_clamps_the_baseline_subtracted_reward(baseline):
    torch.manual_seed(2)
    scores = 30 * torch.randn(6)  # an unbounded reward model's scores: some beyond +-10 after the baseline
    prompt_index = torch.tensor([0, 1, 2, 0, 1, 2])
    mask = torch.ones(6, 3, dtype=torch.bool)
    penalty = torch.zeros(6, 3)
    settings = SimpleNamespace(baseline=baseline, reward_clamp=10.0)
    estimate = ESTIMATORS["reinforce_pp"](EstimatorInputs(scores, penalty, mask, prompt_index), settings)
    expected = slow_reinforce_pp(scores, penalty, mask, prompt_index, baseline, reward_clamp=10.0)
    torch.testing.assert_close(estimate.advantages, expected, atol=1e-5, rtol=1e-5)
    unclamped = ESTIMATORS["reinforce_pp"](EstimatorInputs(scores, penalty, mask, prompt_index),
                                           SimpleNamespace(baseline=baseline))
    assert not torch.allclose(unclamped.advantages, estimate.advantages)


@pytest.mark.integration
def test_reinforce_plus_plus_clamps_each_tokens_kl():
    from tests.algos.fixed_rollout import differs, one_step_delta

    assert differs(one_step_delta("reinforce_pp", kl_clamp=0.05, kl_coef=1.0),
                   one_step_delta("reinforce_pp", kl_coef=1.0))


def test_global_whitening_on_one_rank_is_masked_whitening():
    torch.manual_seed(2)
    values, mask = torch.randn(5, 7), torch.rand(5, 7) > 0.4
    torch.testing.assert_close(global_masked_whiten(values, mask), masked_whiten(values, mask))


def test_loss_types_by_hand():
    loss = torch.tensor([[1.0, 3.0, 0.0], [2.0, 0.0, 0.0]])  # M=2, R=3
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert aggregate_loss(loss, mask, LossShare("bnpo")) == (1 + 3 + 2) / 3
    assert aggregate_loss(loss, mask, LossShare("grpo")) == ((1 + 3) / 2 + 2 / 1) / 2
    assert aggregate_loss(loss, mask, LossShare("dr_grpo", max_length=4)) == (1 + 3 + 2) / (2 * 4)
    assert aggregate_loss(loss, mask, LossShare("dapo", micro_batches=2, step_tokens=10)) == (1 + 3 + 2) / 10
    assert aggregate_loss(loss, mask, LossShare("grpo", micro_batches=2)) == ((1 + 3) / 2 + 2 / 1) / 2 / 2
    assert aggregate_loss(loss, mask, LossShare("grpo", step_sequences=5)) == ((1 + 3) / 2 + 2 / 1) / 5
    assert aggregate_loss(loss, mask, LossShare("dr_grpo", max_length=4, step_sequences=5)) == (1 + 3 + 2) / (5 * 4)
    assert aggregate_loss(loss, mask, LossShare("luspo")) == (1 + 3 + 2) / 2  # (2 x (1 + 3) / 2 + 1 x 2) / 2
    assert aggregate_loss(loss, mask, LossShare("luspo", step_sequences=5)) == (1 + 3 + 2) / 5


def step_gradient(per_token, mask, loss_type, micro_batches, sizes=None):
    """The gradient of one step's loss as the update loop builds it: the shares of its micro-batches summed
    (equal micro-batches, or of the given sizes, as a token budget makes them)."""
    groups = torch.arange(len(mask)).split(sizes or len(mask) // micro_batches)
    share = LossShare(loss_type, len(groups), max_length=per_token.shape[1], step_tokens=float(mask.sum()),
                      step_sequences=len(mask))
    total = sum(aggregate_loss(per_token[idx], mask[idx], share) for idx in groups)
    return torch.autograd.grad(total, per_token)[0]


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "luspo"])
def test_the_step_gradient_does_not_depend_on_the_micro_batching(loss_type):
    torch.manual_seed(3)
    per_token = torch.randn(8, 6, requires_grad=True)
    mask = torch.arange(6).unsqueeze(0) < torch.tensor([6, 1, 3, 2, 6, 5, 1, 4]).unsqueeze(1)  # mixed lengths
    whole = step_gradient(per_token, mask, loss_type, 1)
    for micro_batches in (2, 4, 8):
        torch.testing.assert_close(step_gradient(per_token, mask, loss_type, micro_batches), whole, atol=1e-6, rtol=0)
    uneven = step_gradient(per_token, mask, loss_type, None, sizes=[3, 1, 4])  # micro-batches of unequal sizes
    torch.testing.assert_close(uneven, whole, atol=1e-6, rtol=0)
    if loss_type == "dapo":  # the global token mean: every token weighs 1 / all tokens
        torch.testing.assert_close(whole, mask.float() / mask.sum())


def test_bnpo_depends_on_the_micro_batching_with_mixed_lengths():
    torch.manual_seed(3)
    per_token = torch.randn(8, 6, requires_grad=True)
    mask = torch.arange(6).unsqueeze(0) < torch.tensor([6, 1, 3, 2, 6, 5, 1, 4]).unsqueeze(1)
    assert not torch.allclose(step_gradient(per_token, mask, "bnpo", 1), step_gradient(per_token, mask, "bnpo", 4))


def test_clip_higher_and_its_clip_ratios_by_hand():
    old = torch.zeros(1, 4)
    ratio = torch.tensor([[0.7, 1.25, 1.25, 1.35]])
    advantages = torch.tensor([[-1.0, 1.0, -1.0, 1.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    new = ratio.log().requires_grad_(True)
    loss, stats = clipped_policy_loss(new, old, advantages, mask, 0.2, 0.28)
    # token 0: A<0, ratio below 0.8 -> clipped (no gradient); token 1: A>0, 1.25 inside [0.8, 1.28] -> gradient;
    # token 2: A<0 above the range: the max keeps the unclipped term -> gradient; token 3: A>0, above 1.28 -> clipped
    expected = (-(-1.0 * 0.8) - 1.25 + 1.25 - 1.28) / 4
    assert float(loss.detach()) == pytest.approx(expected, abs=1e-6)
    grad = torch.autograd.grad(loss, new)[0]
    assert (grad[0] != 0).tolist() == [False, True, True, False]
    assert float(stats["clip_low"]) == 0.25 and float(stats["clip_high"]) == 0.25
    assert float(stats["clip_region"]) == 0.5
    _, symmetric = clipped_policy_loss(new, old, advantages, mask, 0.2)  # 1.25 is clipped by 1.2
    assert float(symmetric["clip_high"]) == 0.5


def test_overlong_penalty_by_hand():
    lengths = torch.tensor([10, 24, 26, 28, 32])
    assert overlong_penalty(lengths, 32, 8).tolist() == [0.0, 0.0, -0.25, -0.5, -1.0]
    assert overlong_penalty(lengths, 32, 8, factor=0.5).tolist() == [0.0, 0.0, -0.125, -0.25, -0.5]


def test_split_by_tokens_by_hand():
    from lit_rlhf.ops.batching import split_by_tokens

    tokens = torch.tensor([5, 3, 8, 2, 9, 1])
    groups = split_by_tokens(torch.tensor([0, 1, 2, 3, 4, 5]), tokens, budget=10)
    assert [g.tolist() for g in groups] == [[0, 1], [2, 3], [4, 5]]
    assert [g.tolist() for g in split_by_tokens(torch.tensor([4, 2]), tokens, budget=5)] == [[4], [2]]  # too long


def slow_normalize_then_sum(scores, weights, prompt_index):
    """TRL's normalize_then_sum, one group and one reward at a time: nanmean, Bessel-corrected nanstd (NaN with one
    score), nansum of the weighted normalized scores; NaN for a row no reward scored; then the batch's nanmean and
    nanstd; NaN advantages are 0."""
    n, c = len(scores), len(weights)
    normalized = [[math.nan] * c for _ in range(n)]
    for group in set(prompt_index):
        rows = [i for i in range(n) if prompt_index[i] == group]
        for k in range(c):
            scored = [scores[i][k] for i in rows if not math.isnan(scores[i][k])]
            if not scored:
                continue
            mean = sum(scored) / len(scored)
            std = math.sqrt(sum((s - mean) ** 2 for s in scored) / (len(scored) - 1)) if len(scored) > 1 else math.nan
            for i in rows:
                normalized[i][k] = (scores[i][k] - mean) / (std + 1e-4)
    summed = [math.nan if all(math.isnan(s) for s in scores[i]) else
              sum(w * v for w, v in zip(weights, normalized[i], strict=True) if not math.isnan(w * v))
              for i in range(n)]
    present = [s for s in summed if not math.isnan(s)]
    mean = sum(present) / len(present)
    std = math.sqrt(sum((s - mean) ** 2 for s in present) / (len(present) - 1))
    return [0.0 if math.isnan(s) else (s - mean) / (std + 1e-4) for s in summed]


def test_decoupled_group_advantages_are_trls_normalize_then_sum_in_any_layout():
    """Three rewards with weights 1, 0.5, -2: the second scores one sequence only of prompt 1 (it leaves that group),
    the third applies to prompt 2's sequences alone, and no reward scores one sequence (advantage 0, out of the
    batch's statistics); prompts interleaved."""
    nan = math.nan
    prompt_index = [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2]
    scores = [[1.0, 0.0, nan], [0.0, nan, nan], [1.0, 1.0, 0.3], [0.0, 1.0, nan], [1.0, 2.0, nan], [nan, nan, nan],
              [1.0, 0.5, nan], [1.0, nan, nan], [0.0, 0.0, 0.9], [0.0, 0.0, nan], [0.0, nan, nan], [0.0, 1.0, 0.1]]
    weights = [1.0, 0.5, -2.0]
    mask = torch.tensor([[1, 1, 0]] * 12, dtype=torch.bool)
    inputs = EstimatorInputs(torch.zeros(12), torch.zeros(12, 3), mask, torch.tensor(prompt_index),
                             reward_scores=torch.tensor(scores), reward_weights=torch.tensor(weights))
    estimate = ESTIMATORS["group_decoupled"](inputs, SimpleNamespace())
    expected = slow_normalize_then_sum(scores, weights, prompt_index)
    torch.testing.assert_close(estimate.advantages[:, 0], torch.tensor(expected), atol=1e-5, rtol=0)
    assert estimate.advantages[5].abs().max() == 0 and estimate.advantages[:, 2].abs().max() == 0
    # by hand: prompt 1's first reward is [0, 1, 1, 0] (std sqrt(1/3)), its second scores one sequence only
    assert float(group_normalized_sum(torch.tensor(scores), torch.tensor(weights), torch.tensor(prompt_index))[1]) \
        == pytest.approx(-0.5 / (math.sqrt(1 / 3) + 1e-4), abs=1e-5)


def test_a_reward_equal_across_its_group_adds_exactly_nothing():
    """Eight 0.7s have a float32 std of ~6e-8, not 0: over std + 1e-4 their rounding error would be ~1e-3 per reward,
    which the batch's division by its own small std would blow up."""
    scores = torch.tensor([[0.7, 1.0]] * 8 + [[0.7, float(i % 2)] for i in range(8)])
    prompt_index = torch.arange(2).repeat_interleave(8)
    summed = group_normalized_sum(scores, torch.tensor([1.0, 1.0]), prompt_index)
    assert summed[:8].tolist() == [0.0] * 8
    # each column judged on its own, a reward's None (NaN) left out: [0.7, -, 0.7] is equal, [1, 2, 1] is not
    three = torch.tensor([[0.7, 1.0], [float("nan"), 2.0], [0.7, 1.0]])
    assert group_all_equal(three, torch.zeros(3, dtype=torch.long)).tolist() == [[True, False]] * 3
    torch.testing.assert_close(summed[8:], torch.tensor([-0.5, 0.5] * 4) / (math.sqrt(8 / 28) + 1e-4))
