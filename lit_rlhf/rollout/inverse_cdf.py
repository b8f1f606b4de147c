"""Drawing the next token by inverse transform sampling: one uniform number per sequence against the cumulative
distribution, instead of torch.multinomial, which on CPU draws one exponential variate per vocabulary entry per
sequence (N x V random numbers a decoding step; on a 50k vocabulary the step's largest cost after the forward).

The same distribution, softmax(logits / temperature): a token with probability p owns an interval of length p of
the cumulative sums (float64, so 50k terms keep their resolution), and a zero-probability token owns none.
generate() has no hook for its sampler; `InverseCDFSampler` is the last logits processor of a greedy generate():
it draws the token and leaves it the only finite score, which the greedy step then takes.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor

# the message torch.multinomial raises on such rows, which the engine turns into its one-line error
NOT_FINITE = "probability tensor contains either `inf`, `nan` or element < 0"


def sample_inverse_cdf(logits: torch.Tensor) -> torch.Tensor:
    """One token per row of logits (N,V), drawn from softmax(logits). -> N"""
    probs = torch.softmax(logits.to(torch.float64), dim=-1)  # N,V
    cumulative = probs.cumsum(dim=-1)  # N,V  non-decreasing
    total = cumulative[:, -1:]  # N,1  1 up to rounding
    if not bool(torch.isfinite(total).all()):
        raise RuntimeError(NOT_FINITE)
    uniform = torch.rand(total.shape, dtype=torch.float64, device=logits.device)  # [0, 1)
    target = (1 - uniform) * total  # (0, total]: the first entry reaching it is a token of positive probability
    return torch.searchsorted(cumulative, target).squeeze(-1).clamp_(max=logits.shape[-1] - 1)  # N


class InverseCDFSampler(LogitsProcessor):
    """Samples from softmax(scores / temperature) and returns scores where only the drawn token is finite."""

    def __init__(self, temperature: float):
        self.temperature = temperature

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        tokens = sample_inverse_cdf(scores / self.temperature)  # N
        chosen = torch.full_like(scores, float("-inf"))
        return chosen.scatter_(-1, tokens.unsqueeze(-1), 0.0)
