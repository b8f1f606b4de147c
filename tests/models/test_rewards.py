import pytest
import torch

from lit_rlhf.models import VaderSentiment, WeightedSum


def test_vader_scores_positive_above_negative():
    scores = VaderSentiment()(["", ""], ["I loved this wonderful film.", "It was a terrible, boring mess."])
    assert scores.shape == (2,) and scores[0] > 0.5 and scores[1] < -0.5


def test_weighted_sum_and_plain_functions():
    def length(prompts, completions):
        return torch.tensor([float(len(c)) for c in completions])

    total = WeightedSum([length, VaderSentiment()], [0.5, 2.0])(["", ""], ["ab", "good"])
    vader = VaderSentiment()(["", ""], ["ab", "good"])
    torch.testing.assert_close(total, 0.5 * torch.tensor([2.0, 4.0]) + 2.0 * vader)
    with pytest.raises(ValueError, match="one weight per reward"):
        WeightedSum([length], [1.0, 2.0])
