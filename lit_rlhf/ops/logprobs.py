"""Token log-probabilities and entropies from logits, or in chunks from the last hidden states.

Shapes: N sequences, R response length, V vocab. Logits are divided by the sampling temperature
in every logprob computation, so that logprobs are those of the distribution actually sampled.
"""

from __future__ import annotations

import torch
import torch.utils.checkpoint

# On a CPU the entropy's exp runs over blocks of this many vocabulary entries (rows of it): a block's exp stays in
# the cache for the product that follows (at a 50k vocabulary, much faster than one pass over (1024, V) tensors)
ENTROPY_BLOCK_ELEMENTS = 2**20


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
        entropy = entropy_from_log_probs(log_probs)  # N,R
    return token_logprobs, entropy


def entropy_from_log_probs(log_probs: torch.Tensor) -> torch.Tensor:
    """-sum p log p over the last dimension of normalized log-probabilities, a block of rows at a time on a CPU.
    (..., V) -> (...)"""
    rows = log_probs.reshape(-1, log_probs.shape[-1])  # M,V
    per_block = rows.shape[0] if rows.is_cuda else max(1, ENTROPY_BLOCK_ELEMENTS // max(1, rows.shape[-1]))
    blocks = [-(block.exp() * block).sum(-1) for block in rows.split(per_block)]  # elementwise: float32 under autocast
    entropy = torch.cat(blocks) if blocks else rows.new_zeros(0)
    return entropy.view(log_probs.shape[:-1])


def _chunk_logprobs(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, tokens: torch.Tensor,
                    temperature: float, with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    logits = torch.nn.functional.linear(hidden, weight, bias).float() / temperature  # C,V
    log_probs = torch.log_softmax(logits, dim=-1)  # C,V
    token_logprobs = log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # C
    if not with_entropy:  # its exp over the vocabulary costs about twice the log-softmax
        return token_logprobs, None
    with torch.no_grad():
        entropy = entropy_from_log_probs(log_probs)  # C
    return token_logprobs, entropy


def kept_logits_mib(tokens: int, vocab_size: int) -> float:
    """What keeping the logits of `tokens` positions for the backward pass holds: float32 logits and log-probabilities,
    8 bytes per position and vocabulary entry, in MiB."""
    return tokens * vocab_size * 8 / 2**20


def chunked_logprobs_and_entropy(hidden: torch.Tensor, output_layer: torch.nn.Linear, tokens: torch.Tensor,
                                 temperature: float = 1.0, chunk_size: int = 1024,
                                 recompute: bool = True,
                                 with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logprobs_and_entropy from the last hidden states, chunk_size positions at a time, never holding the logits of
    every position at once in the forward. With gradients and recompute, each chunk runs under activation
    checkpointing, so its (chunk, V) logits are recomputed in the backward pass instead of being kept; without
    recompute they are kept (faster when they fit in memory: see kept_logits_mib).
    (T,H), (T,) -> (T,), (T,) (entropy without gradient; None unless with_entropy)"""
    weight, bias = output_layer.weight, output_layer.bias
    logprobs, entropies = [], []
    for start in range(0, hidden.shape[0], chunk_size):
        part = (hidden[start:start + chunk_size], weight, bias, tokens[start:start + chunk_size], temperature,
                with_entropy)
        if recompute and torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
            token_logprobs, entropy = torch.utils.checkpoint.checkpoint(_chunk_logprobs, *part, use_reentrant=False)
        else:
            token_logprobs, entropy = _chunk_logprobs(*part)
        logprobs.append(token_logprobs)
        entropies.append(entropy)
    if not logprobs:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty if with_entropy else None
    return torch.cat(logprobs), torch.cat(entropies) if with_entropy else None
