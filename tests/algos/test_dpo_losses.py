"""train_dpo.py's loss types against TRL's DPOTrainer formulas, written out per pair in Python floats (math), from
hand-picked log-probabilities; their combination, the f-divergence scores, and the settings refused in one line."""

import math

import pytest
import torch

from lit_rlhf.algos.dpo_losses import LOSS_TYPES, DPOLoss, PairLogprobs, pair_loss, wpo_weights
from lit_rlhf.errors import ConfigError

# B = 4 pairs: policy chosen / rejected, reference chosen / rejected summed logprobs, response token counts
POLICY_CHOSEN = [-10.0, -22.5, -7.25, -30.0]
POLICY_REJECTED = [-12.0, -20.0, -9.5, -28.75]
REFERENCE_CHOSEN = [-11.0, -21.0, -8.0, -29.0]
REFERENCE_REJECTED = [-11.5, -21.5, -8.75, -29.5]
CHOSEN_TOKENS = [4, 9, 3, 12]
REJECTED_TOKENS = [5, 8, 4, 11]
BETA, SMOOTHING, TAU = 0.2, 0.1, 0.05


def pairs():
    return PairLogprobs(*(torch.tensor(v, dtype=torch.float64) for v in (
        POLICY_CHOSEN, POLICY_REJECTED, REFERENCE_CHOSEN, REFERENCE_REJECTED, CHOSEN_TOKENS, REJECTED_TOKENS)))


def logsig(x):
    return -math.log1p(math.exp(-x))


def sig(x):
    return 1 / (1 + math.exp(-x))


def score(logratio, divergence, alpha=0.5):
    return {"reverse_kl": logratio, "forward_kl": -math.exp(-logratio), "js_divergence": logsig(logratio),
            "alpha_divergence": math.exp((alpha - 1) * logratio) / (alpha - 1)}[divergence]


def one_pair(loss_type, i, divergence, e):
    """TRL's loss of pair i."""
    chosen_lr = POLICY_CHOSEN[i] - REFERENCE_CHOSEN[i]
    rejected_lr = POLICY_REJECTED[i] - REFERENCE_REJECTED[i]
    c, r = score(chosen_lr, divergence), score(rejected_lr, divergence)
    x = BETA * (c - r)
    per_token = c / CHOSEN_TOKENS[i] - r / REJECTED_TOKENS[i]
    if loss_type == "sigmoid":
        return -logsig(x)
    if loss_type == "hinge":
        return max(0.0, 1 - x)
    if loss_type == "ipo":
        return (per_token - 1 / (2 * BETA)) ** 2
    if loss_type == "exo_pair":
        return sig(x) * (logsig(x) - math.log(1 - e)) + sig(-x) * (logsig(-x) - math.log(e))
    if loss_type == "nca_pair":
        return -logsig(BETA * c) - 0.5 * logsig(-BETA * c) - 0.5 * logsig(-BETA * r)
    if loss_type == "robust":
        return (-(1 - e) * logsig(x) + e * logsig(-x)) / (1 - 2 * e)
    if loss_type == "bco_pair":
        return -logsig(BETA * c) - logsig(-BETA * r)
    if loss_type == "sppo_hard":
        return (c - 0.5 / BETA) ** 2 + (r + 0.5 / BETA) ** 2
    if loss_type == "apo_zero":
        return 1 - sig(BETA * chosen_lr) + sig(BETA * rejected_lr)
    if loss_type == "apo_down":
        return sig(BETA * chosen_lr) + 1 - sig(x)
    if loss_type == "discopop":
        return -logsig(x) * (1 - sig(x / TAU)) + math.exp(-x) * sig(x / TAU)
    if loss_type == "sft":
        return -sum(POLICY_CHOSEN) / sum(CHOSEN_TOKENS)
    assert loss_type == "sigmoid_norm"
    return -logsig(BETA * per_token)


def slow(loss_type, divergence="reverse_kl", e=SMOOTHING):
    """TRL's loss of each pair, one pair at a time (aot and aot_unpaired compare quantities sorted over the batch)."""
    if loss_type in ("aot", "aot_unpaired"):
        if loss_type == "aot":
            first = sorted(c - r for c, r in zip(POLICY_CHOSEN, POLICY_REJECTED, strict=True))
            second = sorted(c - r for c, r in zip(REFERENCE_CHOSEN, REFERENCE_REJECTED, strict=True))
        else:
            first = sorted(p - r for p, r in zip(POLICY_CHOSEN, REFERENCE_CHOSEN, strict=True))
            second = sorted(p - r for p, r in zip(POLICY_REJECTED, REFERENCE_REJECTED, strict=True))
        return [-logsig(BETA * (a - b)) * (1 - e) - logsig(-BETA * (a - b)) * e
                for a, b in zip(first, second, strict=True)]
    return [one_pair(loss_type, i, divergence, e) for i in range(4)]


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_each_loss_type_is_trl_s_formula(loss_type):
    got = pair_loss(loss_type, pairs(), BETA, label_smoothing=SMOOTHING, discopop_tau=TAU)
    assert got.tolist() == pytest.approx(slow(loss_type), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("divergence", ["forward_kl", "js_divergence", "alpha_divergence"])
@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "nca_pair"])
def test_the_f_divergence_scores_replace_the_log_ratios(divergence, loss_type):
    got = pair_loss(loss_type, pairs(), BETA, divergence=divergence, divergence_alpha=0.5)
    assert got.tolist() == pytest.approx(slow(loss_type, divergence), rel=1e-12)
    assert got.tolist() != pytest.approx(slow(loss_type), rel=1e-3)  # not the reverse KL's


def test_several_loss_types_add_their_weighted_means_and_gradients_flow():
    chosen = torch.tensor(POLICY_CHOSEN, dtype=torch.float64, requires_grad=True)
    logprobs = pairs()
    logprobs.policy_chosen = chosen
    mpo = DPOLoss(loss_type=["sigmoid", "bco_pair", "sft"], loss_weights=[0.8, 0.2, 1.0], beta=BETA)(logprobs)
    expected = sum(w * sum(slow(t)) / 4 for t, w in (("sigmoid", 0.8), ("bco_pair", 0.2), ("sft", 1.0)))
    assert mpo.item() == pytest.approx(expected, rel=1e-12)
    mpo.backward()
    assert torch.isfinite(chosen.grad).all() and (chosen.grad != 0).all()
    assert DPOLoss(loss_type="ipo", beta=BETA)(pairs()).item() == pytest.approx(sum(slow("ipo")) / 4, rel=1e-12)


def test_pair_weights_multiply_each_pair_s_losses_before_the_mean():
    weights = torch.tensor([0.5, 0.25, 1.0, 0.125], dtype=torch.float64)
    got = DPOLoss(loss_type=["sigmoid", "ipo"], loss_weights=[1.0, 0.5], beta=BETA)(pairs(), weights)
    expected = sum(w * sum(x * p for x, p in zip(slow(t), weights.tolist(), strict=True)) / 4
                   for t, w in (("sigmoid", 1.0), ("ipo", 0.5)))
    assert got.item() == pytest.approx(expected, rel=1e-12)


def test_wpo_weights_are_hand_computed_and_carry_no_gradient():
    # 2 pairs: chosen 0, chosen 1, rejected 0, rejected 1; response tokens 2, 1, 1, 3
    logprobs = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0], [-3.0, 0.0, 0.0], [-1.0, -1.0, -4.0]],
                            requires_grad=True)
    log_sum_p2 = torch.tensor([[-0.5, -1.0, 9.0], [-0.25, 9.0, 9.0], [-2.0, 9.0, 9.0], [-0.5, -0.5, -1.0]])
    response = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)
    weights = wpo_weights(logprobs, log_sum_p2, response)
    means = [(-0.5 - 1.0) / 2, -0.25, -1.0, (-0.5 - 0.5 - 3.0) / 3]  # mean of log p - log sum p^2 (9.0: padding)
    expected = [math.exp(means[0] + means[2]), math.exp(means[1] + means[3])]
    assert weights.tolist() == pytest.approx(expected, rel=1e-6) and not weights.requires_grad


@pytest.mark.parametrize("settings, line", [
    ({"loss_type": "dpo"}, r"^algo.loss_type='dpo' is not one of sigmoid, hinge, ipo"),
    ({"loss_type": []}, r"^algo.loss_type=\[\] must be a loss type or a list of them"),
    ({"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0]},
     r"^algo.loss_weights=\[1.0\] must be a list of 2 finite number\(s\), one per algo.loss_type"),
    ({"loss_type": "exo_pair"}, r"^algo.loss_type=exo_pair needs algo.label_smoothing > 0"),
    ({"loss_type": "robust", "label_smoothing": 0.5}, r"^algo.label_smoothing=0.5 must be a number in \[0, 0.5\)"),
    ({"loss_type": "hinge", "label_smoothing": 0.1}, r"^algo.label_smoothing=0.1 is read by algo.loss_type="
                                                     r"robust\|exo_pair\|aot\|aot_unpaired only, not by hinge"),
    ({"loss_type": "ipo", "cdpo_epsilon": 0.1},
     r"^algo.cdpo_epsilon=0.1 makes algo.loss_type=sigmoid conservative, and the loss types are ipo; for label noise "
     r"use algo.loss_type=robust"),
    ({"f_divergence_type": "kl"}, r"^algo.f_divergence_type='kl' is not one of reverse_kl, forward_kl"),
    ({"loss_type": "discopop", "discopop_tau": 0}, r"^algo.discopop_tau=0 must be > 0"),
    ({"loss_type": ["sigmoid", "aot"], "use_weighting": True},
     r"^algo.use_weighting=true weights each pair, and algo.loss_type=aot compares the batch's sorted quantities"),
    ({"use_weighting": 1}, r"^algo.use_weighting=1 must be true or false"),
])
def test_bad_loss_settings_are_one_line(settings, line):
    with pytest.raises(ConfigError, match=line):
        DPOLoss(**settings)


def test_knobs_no_chosen_loss_reads_are_said_once():
    from lit_rlhf.config.validation import _warned

    _warned.clear()
    with pytest.warns(UserWarning, match=r"algo.discopop_tau=0.1 shapes algo.loss_type=discopop, which is not among"):
        DPOLoss(discopop_tau=0.1)
    with pytest.warns(UserWarning, match=r"algo.f_alpha_divergence_coef=0.3 is the alpha of algo.f_divergence_type="
                                         r"alpha_divergence, and it is reverse_kl"):
        DPOLoss(f_alpha_divergence_coef=0.3)
