import pytest
import torch

from lit_rlhf.ops import (
    contains_stop,
    first_stop_index,
    high_entropy_mask,
    masked_mean,
    masked_var,
    masked_whiten,
    response_mask_from_stop,
    truncate_after_stop,
)

STOP, PAD = 0, 1


def test_mask_covers_tokens_up_to_and_including_first_stop():
    responses = torch.tensor([[5, STOP, 7, STOP], [5, 6, 7, 8], [STOP, 3, 3, 3]])
    assert first_stop_index(responses, STOP).tolist() == [1, 4, 0]
    assert response_mask_from_stop(responses, STOP).tolist() == [
        [True, True, False, False], [True, True, True, True], [True, False, False, False]]
    assert contains_stop(responses, STOP).tolist() == [True, False, True]


def test_truncation_pads_after_stop_and_keeps_sampled_pad_ids_before_it():
    # The policy sampled the pad id as a real token before stopping: it stays in the mask.
    responses = torch.tensor([[PAD, 5, STOP, 9, 9], [4, PAD, PAD, 4, 4]])
    truncated, mask = truncate_after_stop(responses, STOP, PAD)
    assert truncated.tolist() == [[PAD, 5, STOP, PAD, PAD], [4, PAD, PAD, 4, 4]]
    assert mask.tolist() == [[True, True, True, False, False], [True] * 5]


def test_masked_statistics_ignore_masked_entries():
    values = torch.tensor([[1.0, 2.0, 100.0], [3.0, 4.0, -50.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    assert masked_mean(values, mask).item() == 2.5
    assert torch.allclose(masked_mean(values, mask, dim=1), torch.tensor([1.5, 3.5]))
    assert torch.isclose(masked_var(values, mask), torch.tensor([1.0, 2.0, 3.0, 4.0]).var())
    whitened = masked_whiten(values, mask)
    kept = whitened[mask]
    assert torch.isclose(kept.mean(), torch.tensor(0.0), atol=1e-6)
    assert torch.isclose(kept.std(), torch.tensor(1.0), atol=1e-4)
    assert (whitened[~mask] == 0).all()


def slow_quantile(values: list[float], q: float) -> float:
    """The q quantile with linear interpolation between the two nearest sorted values (numpy's default, TRL's)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (position - below) * (ordered[above] - ordered[below])


@pytest.mark.parametrize("keep", [1.0, 0.5, 0.2, 0.0])
def test_high_entropy_mask_keeps_the_tokens_at_or_above_the_quantile_of_the_masked_entropies(keep):
    gen = torch.Generator().manual_seed(0)
    entropy = torch.rand(4, 6, generator=gen) * 5  # M,R
    mask = torch.rand(4, 6, generator=gen) > 0.3
    entropy[~mask] = 100.0  # a padded position's entropy never counts, however large
    real = entropy[mask].tolist()
    threshold = slow_quantile(real, 1 - keep)
    expected = [[bool(mask[i, j]) and entropy[i, j].item() >= threshold for j in range(6)] for i in range(4)]
    kept = high_entropy_mask(entropy, mask, keep)
    assert kept.tolist() == expected
    if keep == 1.0:
        assert torch.equal(kept, mask)
    if keep == 0.0:
        assert kept.sum() == 1 and entropy[kept].item() == max(real)


def test_high_entropy_mask_pools_every_ranks_tokens_and_keeps_none_without_any():
    """The quantile of a micro-batch is taken over what pool returns (every rank's entropies, NaN where masked)."""
    entropy = torch.tensor([[1.0, 2.0, 3.0]])
    mask = torch.tensor([[True, True, False]])
    other_rank = torch.tensor([[4.0, 5.0, float("nan")]])
    kept = high_entropy_mask(entropy, mask, 0.5, pool=lambda mine: torch.cat([mine, other_rank]).flatten())
    # the median of 1, 2, 4, 5 is 3: none of this rank's tokens, where its own median (1.5) keeps the token at 2
    assert kept.tolist() == [[False, False, False]]
    assert high_entropy_mask(entropy, mask, 0.5).tolist() == [[False, True, False]]
    nothing = torch.zeros(1, 3, dtype=torch.bool)
    assert not high_entropy_mask(entropy, nothing, 0.2).any()
