import pytest
import torch

from lit_rlhf.ops.finite import all_finite


def slow_all_finite(tensors):
    return all(bool(torch.isfinite(t).all()) for t in tensors)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_single_non_finite_element_anywhere_is_found(bad):
    tensors = [torch.randn(3, 4), torch.randn(5), torch.randn(2, 2, 2).to(torch.bfloat16)]
    assert all_finite(tensors) and slow_all_finite(tensors)
    for which in range(len(tensors)):
        damaged = [t.clone() for t in tensors]
        damaged[which].view(-1)[-1] = bad
        assert not all_finite(damaged)
        assert all_finite(damaged) == slow_all_finite(damaged)


def test_finite_values_whose_norm_overflows_are_finite():
    huge = torch.full((4,), 3e38)  # finite in float32; the sum of squares is not
    assert not bool(torch.isfinite(torch.linalg.vector_norm(huge)))
    assert all_finite([huge, torch.ones(2)])


def test_no_tensors_are_all_finite():
    assert all_finite([])
