import torch

from lit_rlhf.ops import (
    contains_stop,
    first_stop_index,
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
