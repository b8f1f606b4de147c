"""One loss-normalization contract for every algorithm: an optimizer step's gradient does not depend on how its
batch is split, where the loss type promises it (docs/algorithms.md). Compared on a fixed rollout with mixed
response lengths, as the change of the trained tensors after one SGD step with lr 1."""

import pytest
import torch

from tests.algos.fixed_rollout import assert_same, differs, one_step_delta
from tests.apps import ROOT, run_app

pytestmark = pytest.mark.integration  # runs a Trainer or an app


@pytest.mark.parametrize("algo, loss_type", [("grpo", "dapo"), ("grpo", "grpo"), ("grpo", "dr_grpo"),
                                             ("grpo", "luspo"), ("rloo", "dapo"), ("ppo", "dapo"),
                                             ("reinforce_pp", "dapo")])
def test_four_micro_batches_give_the_gradient_of_one(algo, loss_type):
    num_epochs = {"ppo": {"num_ppo_epochs": 1}}.get(algo, {})
    if loss_type == "luspo":  # LUSPO's setup: GSPO's sequence ratio
        num_epochs["importance_sampling_level"] = "sequence"
    whole = one_step_delta(algo, loss_type=loss_type, **num_epochs)
    assert_same(one_step_delta(algo, loss_type=loss_type, gradient_accumulation_steps=4, **num_epochs), whole)


@pytest.mark.parametrize("algo, loss_type", [("grpo", "dapo"), ("grpo", "grpo"), ("grpo", "dr_grpo"),
                                             ("ppo", "dapo")])
def test_micro_batches_by_token_budget_give_the_gradient_of_one(algo, loss_type):
    """Sequences of the fixed rollout hold 2 to 13 tokens: a budget of 20 makes micro-batches of unequal sizes."""
    num_epochs = {"ppo": {"num_ppo_epochs": 1}}.get(algo, {})
    whole = one_step_delta(algo, loss_type=loss_type, **num_epochs)
    assert_same(one_step_delta(algo, loss_type=loss_type, max_tokens_per_micro_batch=20, **num_epochs), whole)


def test_bnpo_is_a_mean_of_micro_batch_means_so_it_depends_on_the_split():
    whole = one_step_delta("grpo", loss_type="bnpo")
    assert differs(one_step_delta("grpo", loss_type="bnpo", gradient_accumulation_steps=4), whole)


@pytest.mark.parametrize("loss_type", ["bnpo", "grpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("equal_value", [0.5, 0.7])
def test_filtered_zero_std_groups_leave_the_loss_and_its_token_count(loss_type, equal_value):
    """A group whose K scores are equal has zero advantages, but its tokens (and, for grpo and dr_grpo, its
    sequences) still count in the loss's denominator and in the KL term: filtered, the step is the one of a
    rollout without it, for every loss type. 0.7 is not exact in float32: its group std computes to ~6e-8."""
    equal = {"equal_first_group": True, "equal_value": equal_value}
    without = one_step_delta("grpo", loss_type=loss_type, rollout_options={**equal, "drop_first_group": True})
    assert_same(one_step_delta("grpo", loss_type=loss_type, filter_zero_std_groups=True, rollout_options=equal),
                without)
    assert differs(one_step_delta("grpo", loss_type=loss_type, rollout_options=equal), without)


@pytest.mark.parametrize("loss_type", ["bnpo", "grpo", "dr_grpo", "dapo"])
def test_masked_truncated_completions_leave_the_tokens_of_the_loss_but_not_its_sequence_count(loss_type):
    """TRL's mask_truncated_completions zeroes a truncated response's tokens in the loss's mask: the step is the one
    of a rollout whose truncated responses hold no token (out of every token count; still sequences of grpo's and
    dr_grpo's means, and still in their group's advantages)."""
    without_tokens = one_step_delta("grpo", loss_type=loss_type, rollout_options={"empty_truncated": True})
    assert_same(one_step_delta("grpo", loss_type=loss_type, mask_truncated_completions=True), without_tokens)
    assert differs(one_step_delta("grpo", loss_type=loss_type), without_tokens)


@pytest.mark.parametrize("loss_type", ["bnpo", "grpo"])
def test_rloo_s_masked_truncated_completions_leave_the_loss_and_their_kl_leaves_their_reward(loss_type):
    """TRL's RLOO zeroes a truncated response's completion mask: its tokens leave the loss and its summed KL is 0,
    its score still in its siblings' leave-one-out baselines. The step is the one of a rollout whose truncated
    responses hold no token (whose KL is 0 for want of tokens)."""
    settings = {"loss_type": loss_type, "kl_coef": 0.5}
    without_tokens = one_step_delta("rloo", **settings, rollout_options={"empty_truncated": True})
    assert_same(one_step_delta("rloo", **settings, mask_truncated_completions=True), without_tokens)
    assert differs(one_step_delta("rloo", **settings), without_tokens)


def test_the_bias_corrected_kl_changes_the_step():
    assert differs(one_step_delta("grpo", use_bias_correction_kl=True), one_step_delta("grpo",
                                                                                      use_bias_correction_kl=False))


def run_worker(devices, algo, out, *cases):
    """The worker script on DEVICES ranks, one update per case (loss_contract_worker.py): rank zero in this process,
    Lightning's launcher starts the others (once for all cases)."""
    result = run_app("tests/algos/loss_contract_worker.py", str(devices), algo, str(out), *cases, cwd=ROOT,
                     env={"PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-4000:]
    return torch.load(out, weights_only=True)


@pytest.mark.multi_rank
def test_the_global_token_mean_on_two_ddp_ranks_matches_one_process(tmp_path):
    """Ranks hold different numbers of tokens: dapo divides by the tokens of both, and DDP's average of the
    ranks' gradients is accounted for, so 2 ranks (gloo) give the 1-process gradient; bnpo does not. The
    top_entropy_quantile of a micro-batch is taken over both ranks' tokens, as one process takes it over its own, and
    normalize_then_sum's batch statistics over both ranks' sequences."""
    high_entropy, decoupled = "dapo,top_entropy_quantile=0.3", "dapo,multi_objective_aggregation=normalize_then_sum"
    two = run_worker(2, "grpo", tmp_path / "two.pt", "dapo", "bnpo", high_entropy, decoupled)
    assert_same(two["dapo"], one_step_delta("grpo", devices=1, loss_type="dapo"))
    assert differs(two["bnpo"], one_step_delta("grpo", loss_type="bnpo"))
    one = one_step_delta("grpo", loss_type="dapo", top_entropy_quantile=0.3)
    assert_same(two[high_entropy], one)
    assert differs(one, two["dapo"])  # the mask left tokens out
    one = one_step_delta("grpo", loss_type="dapo", multi_objective_aggregation="normalize_then_sum")
    assert_same(two[decoupled], one)
    assert differs(one, two["dapo"])  # each reward normalized apart


@pytest.mark.parametrize("algo", ["grpo", "rloo"])
@pytest.mark.parametrize("setting", [{"policy_loss": "cispo", "cispo_cap": 1.05}, {"policy_loss": "sapo"},
                                     {"importance_sampling_level": "sequence"}, {"policy_loss": "vespo"}])
def test_the_policy_losses_are_used_by_grpo_and_rloo(algo, setting):
    """On-policy (ratio 1) every policy loss has the surrogate's gradient (VESPO's weight is 1 at ratio 1); the second
    epoch's ratios differ from 1, where CISPO, SAPO, GSPO's sequence ratio and VESPO each take another step than the
    clipped surrogate."""
    # the policy loss alone: GRPO's bias-corrected KL under GSPO is weighted by the sequence ratio (as TRL), whose
    # gradient differs from the token ratio's even on-policy
    plain = {"use_bias_correction_kl": False} if algo == "grpo" else {}
    setting = {**setting, **plain}
    epochs = {"num_ppo_epochs": 2, "loss_type": "dapo"}
    first_epoch_only = one_step_delta(algo, **setting, loss_type="dapo")
    assert_same(first_epoch_only, one_step_delta(algo, loss_type="dapo", **plain))
    assert differs(one_step_delta(algo, **setting, **epochs), one_step_delta(algo, **epochs, **plain))
