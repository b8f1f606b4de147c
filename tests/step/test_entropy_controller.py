"""GRPO's entropy-bonus coefficient: fixed, or TRL's adaptive entropy control, against hand values."""

import math

import pytest
import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.step.entropy_controller import EntropyController


def same_rank(totals):
    return totals


def test_the_adaptive_coefficient_moves_by_delta_within_its_bounds_and_applies_only_at_or_below_the_target():
    control = EntropyController(0.01, adaptive=True, target=0.5, delta=0.02, coef_min=0.0, coef_max=0.05)
    assert control.enabled and control.applied() == 0.0  # nothing measured yet: no bonus
    # an optimizer step of two micro-batches: the masked tokens' entropies 0.2, 0.4 and 0.6, mean 0.4 <= 0.5
    control.observe(torch.tensor([[0.2, 0.4, 9.0]]), torch.tensor([[True, True, False]]))
    control.observe(torch.tensor([[0.6, 7.0, 7.0]]), torch.tensor([[True, False, False]]))
    assert control.applied() == 0.0  # the update comes at the step's end
    control.step(same_rank)
    assert control.last_entropy == pytest.approx(0.4) and control.coef == pytest.approx(0.03)
    assert control.applied() == pytest.approx(0.03)
    for entropy, coef in [(0.1, 0.05), (0.1, 0.05), (0.9, 0.03), (0.9, 0.01), (0.9, 0.0), (0.9, 0.0)]:
        control.observe(torch.tensor([[entropy]]), torch.tensor([[True]]))
        control.step(same_rank)
        assert control.coef == pytest.approx(coef)
        assert control.applied() == (pytest.approx(coef) if entropy <= 0.5 else 0.0)
    control.step(same_rank)  # a step with no micro-batch measured changes nothing
    assert control.coef == 0.0 and control.last_entropy == pytest.approx(0.9)


def test_the_entropy_is_the_mean_over_every_ranks_tokens_not_the_mean_of_their_means():
    control = EntropyController(0.1, adaptive=True, target=0.5, delta=0.01)
    control.observe(torch.tensor([[0.8, 0.8, 0.8]]), torch.ones(1, 3, dtype=torch.bool))  # this rank: mean 0.8
    other_rank = torch.tensor([0.0, 5.0])  # five tokens of entropy 0: the mean of the two ranks' means would be 0.4
    control.step(lambda totals: totals + other_rank)
    assert control.last_entropy == pytest.approx(2.4 / 8) and control.coef == pytest.approx(0.11)


def test_a_fixed_coefficient_always_applies_and_never_moves():
    control = EntropyController(0.3)
    control.observe(torch.tensor([[5.0]]), torch.tensor([[True]]))
    control.step(same_rank)
    assert control.applied() == 0.3 and control.coef == 0.3 and control.last_entropy == math.inf
    assert not EntropyController(0.0).enabled and EntropyController(0.0, adaptive=True).enabled


def test_the_state_round_trips_and_a_corrupted_one_is_one_line():
    control = EntropyController(0.2, adaptive=True)
    control.coef, control.last_entropy = 0.07, 0.31
    resumed = EntropyController(0.2, adaptive=True)
    resumed.load_state_dict(control.state_dict())
    assert (resumed.coef, resumed.last_entropy) == (0.07, 0.31)
    resumed.load_state_dict({"coef": 0.0, "last_entropy": math.inf})  # saved before the first measurement
    for bad in ({"coef": "0.1", "last_entropy": 0.2}, {"coef": math.nan, "last_entropy": 0.2},
                {"coef": math.inf, "last_entropy": 0.2}, {"coef": True, "last_entropy": 0.2}, [0.1, 0.2]):
        with pytest.raises(ConfigError, match=r"^the checkpoint's rlhf_state.entropy_controller holds .*, not a "
                                              r"coefficient and an entropy \(the file is corrupted\)"):
            resumed.load_state_dict(bad)
