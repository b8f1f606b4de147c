"""Token log-probabilities and entropies from logits.

Shapes: N sequences, R response length, V vocab. Logits are divided by the sampling temperature
in every logprob computation, so that logprobs are those of the distribution actually sampled.
"""

from __future__ import annotations

import torch


def logprobs_from_logits(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log p(token) under softmax(logits / temperature). (N,R,V), (N,R) -> (N,R)"""
    # log_softmax + gather, the computation of logprobs_and_entropy: the two agree to the bit, so the
    # KL of a policy equal to its reference is exactly 0 whichever path computed its logprobs
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)  # N,R,V
    return log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # N,R


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of softmax(logits / temperature) at every position. (N,R,V) -> (N,R)"""
    logits = logits.float() / temperature
    probs = torch.softmax(logits, dim=-1)  # N,R,V
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)  # N,R


def logprobs_and_entropy(logits: torch.Tensor, tokens: torch.Tensor,
                         temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Both of the above from one log-softmax pass over the vocabulary (the update's hot path).
    The entropy carries no gradient. (N,R,V), (N,R) -> (N,R), (N,R)"""
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)  # N,R,V
    token_logprobs = log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # N,R
    with torch.no_grad():
        entropy = -(log_probs.exp() * log_probs).sum(-1)  # N,R
    return token_logprobs, entropy
