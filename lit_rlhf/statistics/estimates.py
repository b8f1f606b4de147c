"""Statistics of an evaluation: bootstrap confidence intervals over prompts, distinct-n diversity."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torchmetrics import MeanMetric
from torchmetrics.wrappers import BootStrapper


def per_prompt_mean(values: torch.Tensor, prompt_index: torch.Tensor) -> torch.Tensor:
    """Mean of the K values of each prompt: the unit the bootstrap resamples. (N,), (N,) -> (B,)"""
    num_prompts = int(prompt_index.max()) + 1
    sums = torch.zeros(num_prompts, dtype=values.dtype).index_add_(0, prompt_index, values)  # B
    counts = torch.zeros(num_prompts, dtype=values.dtype).index_add_(0, prompt_index, torch.ones_like(values))
    return sums / counts  # B


@functools.lru_cache(maxsize=4)
def mean_bootstrapper(confidence: float, num_bootstraps: int) -> BootStrapper:
    """torchmetrics' percentile bootstrap of a mean. Built once per process and reset before each use: building it
    copies its metric num_bootstraps times (about 0.6 s for 1000), resetting it is a few milliseconds."""
    alpha = (1 - confidence) / 2
    return BootStrapper(MeanMetric(sync_on_compute=False), num_bootstraps=num_bootstraps, mean=False, std=False,
                        quantile=torch.tensor([alpha, 1 - alpha]), sampling_strategy="multinomial",
                        sync_on_compute=False)  # evaluation runs on one rank: never all-gather


def bootstrap_mean_ci(values: torch.Tensor, confidence: float = 0.95, num_bootstraps: int = 1000,
                      seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean of values (B,), resampling whole rows."""
    bootstrap = mean_bootstrapper(confidence, num_bootstraps)
    bootstrap.reset()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        bootstrap.update(values.detach().float().cpu())
    low, high = bootstrap.compute()["quantile"].tolist()
    return low, high


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct n-grams over all n-grams of all texts (Li et al. 2016), on whitespace words.
    Falls as completions collapse onto the same phrases, a common sign of reward hacking."""
    ngrams = [tuple(words[i:i + n]) for words in (t.split() for t in texts) for i in range(len(words) - n + 1)]
    return len(set(ngrams)) / len(ngrams) if ngrams else 0.0
