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


class TwoRanks:
    """An all-reduce over two ranks in one process: the other rank's tensor is what it passed first."""

    def __init__(self):
        self.passed = []

    def reduce(self, tensor, reduce_op):
        self.passed.append(tensor)
        total = sum(self.passed)
        return total / 2 if reduce_op == "mean" else total


def test_over_ranks_a_statistic_is_the_mean_of_the_ranks_where_it_is_not_nan():
    from lit_rlhf.statistics.rollout import mean_over_ranks

    def stats(kl, code, none):
        values = {"kl": kl, "rewards/code/mean": code, "rewards/none/mean": none}
        return {name: torch.tensor(value) for name, value in values.items()}

    rank_one, rank_zero = stats(1.0, math.nan, math.nan), stats(3.0, 5.0, math.nan)
    strategy = TwoRanks()
    mean_over_ranks(rank_one, strategy, torch.device("cpu"))  # its tensor, as the collective receives it
    means = mean_over_ranks(rank_zero, strategy, torch.device("cpu"))
    assert means["kl"] == 2.0 and means["rewards/code/mean"] == 5.0 and means["rewards/none/mean"].isnan()
