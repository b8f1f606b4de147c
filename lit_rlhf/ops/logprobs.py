"""Token log-probabilities and entropies from logits, or in chunks from the last hidden states.

Shapes: N sequences, R response length, V vocab. Logits are divided by the sampling temperature
in every logprob computation, so that logprobs are those of the distribution actually sampled.
"""

from __future__ import annotations

import contextlib

import torch

# On a CPU the float32 maths over the vocabulary (the entropy's exp, the chunked log-softmax) runs over blocks of this
# many entries (rows of it): a block stays in the cache for the operation that follows (at a 50k vocabulary, much
# faster than one pass over (1024, V) tensors)
ENTROPY_BLOCK_ELEMENTS = 2**20


def upcast(logits: torch.Tensor) -> torch.Tensor:
    """Logits in float32 at least (bfloat16 and float16 are upcast; float64 stays), the precision of the maths below."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def logprobs_from_logits(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log p(token) under softmax(logits / temperature). (N,R,V), (N,R) -> (N,R)"""
    # log_softmax + gather, the computation of logprobs_and_entropy: the two agree to the bit, so the
    # KL of a policy equal to its reference is exactly 0 whichever path computed its logprobs
    log_probs = torch.log_softmax(upcast(logits) / temperature, dim=-1)  # N,R,V
    return log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # N,R


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of softmax(logits / temperature) at every position. (N,R,V) -> (N,R)"""
    logits = upcast(logits) / temperature
    probs = torch.softmax(logits, dim=-1)  # N,R,V
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)  # N,R


def logprobs_and_entropy(logits: torch.Tensor, tokens: torch.Tensor,
                         temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Both of the above from one log-softmax pass over the vocabulary (the update's hot path).
    The entropy carries no gradient. (N,R,V), (N,R) -> (N,R), (N,R)"""
    log_probs = torch.log_softmax(upcast(logits) / temperature, dim=-1)  # N,R,V
    token_logprobs = log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # N,R
    with torch.no_grad():
        entropy = entropy_from_log_probs(log_probs)  # N,R
    return token_logprobs, entropy


# The no-grad statistics of the predicted distribution a forward can return beside the logprobs, each token's, from the
# same float32 log-softmax block (no second pass over the logits):
#   entropy     -sum_v p_v log p_v
#   top1        1.0 where the target is the most likely token (TRL's mean_token_accuracy counts these)
#   mean_logit  the mean over the vocabulary of the logits (over the temperature: TRL's logits/chosen at temperature 1)
#   log_sum_p2  log sum_v p_v^2 (WPO's normalizer: TRL's use_weighting)
TOKEN_STATISTICS = ("entropy", "top1", "mean_logit", "log_sum_p2")


def block_statistics(log_probs: torch.Tensor, logits: torch.Tensor, temperature: float, tokens: torch.Tensor,
                     statistics: tuple[str, ...]) -> list[torch.Tensor]:
    """The named TOKEN_STATISTICS of a block of rows: its float32 log-probabilities (B,V), the logits they came from
    (B,V, any dtype; divided by the temperature), and the target tokens (B). -> one (B,) tensor per name"""
    computed = []
    for name in statistics:
        if name == "entropy":
            computed.append(-(log_probs.exp() * log_probs).sum(-1))
        elif name == "top1":
            computed.append((log_probs.argmax(-1) == tokens).to(log_probs.dtype))
        elif name == "mean_logit":
            computed.append(logits.sum(-1, dtype=log_probs.dtype) / (logits.shape[-1] * temperature))
        elif name == "log_sum_p2":
            computed.append(torch.logsumexp(2 * log_probs, dim=-1))
        else:
            raise ValueError(f"unknown token statistic {name!r}; one of {', '.join(TOKEN_STATISTICS)}")
    return computed


@torch.no_grad()
def statistics_from_log_probs(log_probs: torch.Tensor, logits: torch.Tensor, tokens: torch.Tensor,
                              temperature: float, statistics: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The named TOKEN_STATISTICS at every position of full logits (N,R,V) and their log-probabilities (the entropy
    in entropy_from_log_probs's blocks: the same bits), a block of rows at a time on a CPU. -> name: (N,R)"""
    shape, vocab_size = log_probs.shape[:-1], log_probs.shape[-1]
    rows, logit_rows, targets = log_probs.reshape(-1, vocab_size), logits.reshape(-1, vocab_size), tokens.reshape(-1)
    per_block = rows.shape[0] if rows.is_cuda else max(1, ENTROPY_BLOCK_ELEMENTS // max(1, vocab_size))
    blocks = [block_statistics(rows[start:start + per_block], logit_rows[start:start + per_block], temperature,
                               targets[start:start + per_block], statistics)
              for start in range(0, rows.shape[0], per_block)]
    return {name: (torch.cat([block[i] for block in blocks]) if blocks else rows.new_zeros(0)).view(shape)
            for i, name in enumerate(statistics)}


def logprobs_and_statistics(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0,
                            statistics: tuple[str, ...] = ("entropy",)) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """logprobs_and_entropy with any of TOKEN_STATISTICS (no gradient) in place of the entropy.
    (N,R,V), (N,R) -> (N,R), name: (N,R)"""
    log_probs = torch.log_softmax(upcast(logits) / temperature, dim=-1)  # N,R,V
    token_logprobs = log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # N,R
    return token_logprobs, statistics_from_log_probs(log_probs, logits, tokens, temperature, statistics)


def entropy_from_log_probs(log_probs: torch.Tensor) -> torch.Tensor:
    """-sum p log p over the last dimension of normalized log-probabilities, a block of rows at a time on a CPU.
    (..., V) -> (...)"""
    rows = log_probs.reshape(-1, log_probs.shape[-1])  # M,V
    per_block = rows.shape[0] if rows.is_cuda else max(1, ENTROPY_BLOCK_ELEMENTS // max(1, rows.shape[-1]))
    blocks = [-(block.exp() * block).sum(-1) for block in rows.split(per_block)]  # elementwise: float32 under autocast
    entropy = torch.cat(blocks) if blocks else rows.new_zeros(0)
    return entropy.view(log_probs.shape[:-1])


# On an accelerator the float32 maths over the vocabulary of chunked_logprobs_and_entropy runs on blocks of about
# this many (row x vocabulary) entries (16 MiB), so that no (rows, V) float32 tensor is held whole
ACCELERATOR_BLOCK_ELEMENTS = 2**22


def _row_blocks(rows: int, vocab_size: int, device: torch.device) -> list[slice]:
    elements = ENTROPY_BLOCK_ELEMENTS if device.type == "cpu" else ACCELERATOR_BLOCK_ELEMENTS
    per_block = max(1, elements // max(1, vocab_size))
    return [slice(start, start + per_block) for start in range(0, rows, per_block)]


def _block_log_probs(logits: torch.Tensor, rows: slice, temperature: float) -> torch.Tensor:
    """The float32 (at least) log-probabilities of a block of rows of the logits. -> (B,V)"""
    return torch.log_softmax(upcast(logits[rows]) / temperature, dim=-1)


class _OutputLayerLogprobs(torch.autograd.Function):
    """log p(token) and the entropy of softmax((hidden W^T + b) / temperature), row by row, holding at most the
    logits in the dtype the output layer computes in (bfloat16 under autocast or with bfloat16 weights): the float32
    log-probabilities exist a block of rows at a time, in the forward and again in the backward, where the logits'
    gradient overwrites them. The values are those of log_softmax + gather; the gradient is log_softmax's:
    g * (onehot(token) - p) / temperature.
    keep_logits: the logits are kept for the backward pass; else recomputed there (one more matmul)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, tokens, temperature, keep_logits, statistics):
        logits = torch.nn.functional.linear(hidden, weight, bias)  # C,V  (autocast's dtype under autocast)
        logprobs = torch.empty(len(hidden), dtype=torch.promote_types(logits.dtype, torch.float32),
                               device=hidden.device)  # C
        stats = logprobs.new_empty(len(statistics), len(hidden))  # S,C
        for rows in _row_blocks(len(hidden), logits.shape[-1], logits.device):
            log_probs = _block_log_probs(logits, rows, temperature)  # B,V
            logprobs[rows] = log_probs.gather(-1, tokens[rows].unsqueeze(-1)).squeeze(-1)
            for i, values in enumerate(block_statistics(log_probs, logits[rows], temperature, tokens[rows],
                                                        statistics)):
                stats[i, rows] = values
        ctx.save_for_backward(hidden, weight, bias, tokens, logits if keep_logits else None)
        ctx.temperature, ctx.compute_dtype = temperature, logits.dtype
        ctx.mark_non_differentiable(stats)
        return logprobs, stats

    @staticmethod
    def backward(ctx, grad_logprobs, _grad_statistics):
        hidden, weight, bias, tokens, logits = ctx.saved_tensors
        dtype = ctx.compute_dtype
        weight_c = weight.to(dtype)
        if logits is None:  # recomputed as the forward computed it
            logits = torch.nn.functional.linear(hidden.to(dtype), weight_c, None if bias is None else bias.to(dtype))
        # the gradient takes the logits' place block by block (a block's log-probabilities are read before its rows
        # are written): a chunk's logits and their gradient are never held together. A second backward through kept
        # logits then fails at unpacking (their version moved) instead of reading the gradient as logits.
        grad_logits = logits  # C,V
        for rows in _row_blocks(len(hidden), logits.shape[-1], logits.device):
            log_probs = _block_log_probs(logits, rows, ctx.temperature)  # B,V
            g = grad_logprobs[rows].unsqueeze(-1)  # B,1
            grad = -(log_probs.exp() * g)  # log_softmax's backward of a gradient on one entry per row
            grad.scatter_add_(-1, tokens[rows].unsqueeze(-1), g)
            grad_logits[rows] = grad / ctx.temperature
        grad_hidden = grad_logits.mm(weight_c).to(hidden.dtype) if ctx.needs_input_grad[0] else None
        grad_weight = grad_logits.t().mm(hidden.to(dtype)).to(weight.dtype) if ctx.needs_input_grad[1] else None
        grad_bias = grad_logits.sum(0).to(bias.dtype) if bias is not None and ctx.needs_input_grad[2] else None
        return grad_hidden, grad_weight, grad_bias, None, None, None, None


def output_layer_dtype(hidden: torch.Tensor, output_layer: torch.nn.Linear) -> torch.dtype:
    """The dtype the output layer computes its logits in: float32 for a layer that says it does (a
    models.output_layer.Float32OutputLayer), else autocast's where autocast is on, else its inputs'."""
    if getattr(output_layer, "computes_in_float32", False):
        return torch.float32
    if torch.is_autocast_enabled(hidden.device.type):
        return torch.get_autocast_dtype(hidden.device.type)
    return torch.promote_types(hidden.dtype, output_layer.weight.dtype)


def kept_logits_mib(tokens: int, vocab_size: int, bytes_per_entry: int = 4) -> float:
    """What keeping the logits of `tokens` positions for the backward pass holds, in MiB: one (tokens, V) tensor in
    the dtype the output layer computes in (4 bytes in float32, 2 in bfloat16)."""
    return tokens * vocab_size * bytes_per_entry / 2**20


def chunked_logprobs_and_entropy(hidden: torch.Tensor, output_layer: torch.nn.Linear, tokens: torch.Tensor,
                                 temperature: float = 1.0, chunk_size: int = 1024,
                                 recompute: bool = True,
                                 with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """chunked_logprobs_and_statistics with the entropy alone (or nothing). (T,H), (T,) -> (T,), (T,) or None"""
    logprobs, statistics = chunked_logprobs_and_statistics(hidden, output_layer, tokens, temperature, chunk_size,
                                                           recompute, ("entropy",) if with_entropy else ())
    return logprobs, statistics.get("entropy")


def chunked_logprobs_and_statistics(hidden: torch.Tensor, output_layer: torch.nn.Linear, tokens: torch.Tensor,
                                    temperature: float = 1.0, chunk_size: int = 1024, recompute: bool = True,
                                    statistics: tuple[str, ...] = ()) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """logprobs_and_statistics from the last hidden states, chunk_size positions at a time, never holding the logits
    of every position at once, nor a chunk's logits in float32 (_OutputLayerLogprobs). With gradients and recompute,
    each chunk's logits are recomputed in the backward pass instead of being kept (faster to keep them when they fit
    in memory: see kept_logits_mib).
    (T,H), (T,) -> (T,), name: (T,) (the statistics without gradient)"""
    weight, bias = output_layer.weight, output_layer.bias
    in_float32 = getattr(output_layer, "computes_in_float32", False)
    if in_float32:  # as the layer's own forward: float32 inputs, autocast off
        hidden = hidden.to(torch.float32)
    logprobs, stats = [], []
    with torch.autocast(hidden.device.type, enabled=False) if in_float32 else contextlib.nullcontext():
        for start in range(0, hidden.shape[0], chunk_size):
            token_logprobs, chunk_stats = _OutputLayerLogprobs.apply(hidden[start:start + chunk_size], weight, bias,
                                                                     tokens[start:start + chunk_size], temperature,
                                                                     not recompute, tuple(statistics))
            logprobs.append(token_logprobs)
            stats.append(chunk_stats)
    if not logprobs:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, {name: empty for name in statistics}
    table = torch.cat(stats, dim=1)  # S,T
    return torch.cat(logprobs), {name: table[i] for i, name in enumerate(statistics)}
