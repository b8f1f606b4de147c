"""rewards/<name>/mean and /std are over the completions a reward scored: one that returned None for some (TRL's
"does not apply") is averaged over the others, as TRL's nanmean and nanstd average it."""

import math

import pytest
import torch

from lit_rlhf.statistics.rollout import reward_stats


def test_each_rewards_mean_and_std_are_over_the_completions_it_scored():
    nan = math.nan
    stats = reward_stats({"all": torch.tensor([1.0, 2.0, 3.0, 6.0]), "some": torch.tensor([nan, 2.0, nan, 4.0]),
                          "one": torch.tensor([nan, nan, 5.0, nan]), "none": torch.tensor([nan, nan, nan, nan])})
    assert stats["rewards/all/mean"] == 3.0 and stats["rewards/all/std"] == pytest.approx(math.sqrt(14 / 3))
    assert stats["rewards/some/mean"] == 3.0 and stats["rewards/some/std"] == pytest.approx(math.sqrt(2))
    assert stats["rewards/one/mean"] == 5.0 and stats["rewards/one/std"] == 0.0
    assert stats["rewards/none/mean"].isnan() and stats["rewards/none/std"].isnan()
