"""VaderSentiment: the VADER analyzer (Hutto & Gilbert 2014, PyPI `vaderSentiment`), offline; the default run's
reward."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lit_rlhf.config.validation import check_flag


class VaderSentiment:
    """Positivity of the completion: VADER's compound score in [-1, 1]."""

    def __init__(self, include_prompt: bool = False):
        check_flag("vader.include_prompt", include_prompt)
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        self.analyzer = SentimentIntensityAnalyzer()
        self.include_prompt = include_prompt

    def __call__(self, prompts: Sequence[str], completions: Sequence[str]) -> torch.Tensor:
        texts = [p + c for p, c in zip(prompts, completions, strict=True)] if self.include_prompt else completions
        return torch.tensor([self.analyzer.polarity_scores(t)["compound"] for t in texts], dtype=torch.float32)
