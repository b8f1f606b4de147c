"""lit_rlhf.statistics.estimates: diversity, per-prompt means and bootstrap intervals against hand-computed values."""

import math

import pytest
import torch

from lit_rlhf.statistics.estimates import bootstrap_mean_ci, distinct_n, per_prompt_mean


def test_distinct_n_counts_unique_ngrams_over_all_completions():
    texts = ["a b a b", "a b c"]  # unigrams a b a b a b c: 3 distinct of 7; bigrams ab ba ab ab bc: 3 of 5
    assert distinct_n(texts, 1) == pytest.approx(3 / 7)
    assert distinct_n(texts, 2) == pytest.approx(3 / 5)
    assert distinct_n(["same words here"] * 4, 2) == pytest.approx(2 / 8)  # collapse shows as a low ratio
    assert distinct_n(["", "one"], 2) == 0.0


def test_per_prompt_mean_averages_the_k_samples_of_each_prompt():
    values = torch.tensor([1.0, 3.0, 10.0, 20.0, 30.0])
    prompt_index = torch.tensor([0, 0, 1, 1, 1])
    assert per_prompt_mean(values, prompt_index).tolist() == [2.0, 20.0]


def test_bootstrap_interval_matches_the_normal_approximation_on_a_large_sample():
    values = torch.randn(2000, generator=torch.Generator().manual_seed(1)) * 2 + 0.5
    low, high = bootstrap_mean_ci(values, confidence=0.95, num_bootstraps=500, seed=0)
    half_width = 1.96 * values.std().item() / math.sqrt(len(values))  # ~0.088
    assert low < values.mean().item() < high
    assert (high - low) / 2 == pytest.approx(half_width, rel=0.15)
    assert bootstrap_mean_ci(values, 0.95, 500, seed=0) == (low, high)  # seeded: reproducible
    narrow = bootstrap_mean_ci(values, confidence=0.5, num_bootstraps=500, seed=0)
    assert high - low > narrow[1] - narrow[0]


def test_bootstrap_leaves_the_global_random_stream_alone():
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    bootstrap_mean_ci(torch.arange(10.0), num_bootstraps=50)
    assert torch.equal(torch.rand(3), expected)


def test_a_reused_bootstrap_gives_what_a_freshly_built_one_gives():
    """The bootstrap is built once per process and reset before each use: an interval after another one on other
    values equals torchmetrics' BootStrapper built anew, to the bit."""
    from torchmetrics import MeanMetric
    from torchmetrics.wrappers import BootStrapper

    generator = torch.Generator().manual_seed(2)
    first, second = torch.randn(40, generator=generator), torch.randn(30, generator=generator) + 1
    bootstrap_mean_ci(first, confidence=0.9, num_bootstraps=200, seed=5)
    reused = bootstrap_mean_ci(second, confidence=0.9, num_bootstraps=200, seed=5)
    fresh = BootStrapper(MeanMetric(), num_bootstraps=200, mean=False, std=False,
                         quantile=torch.tensor([0.05, 0.95]), sampling_strategy="multinomial")
    torch.manual_seed(5)
    fresh.update(second)
    assert reused == tuple(fresh.compute()["quantile"].tolist())
