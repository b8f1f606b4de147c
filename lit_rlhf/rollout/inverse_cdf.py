"""Drawing the next token by inverse transform sampling: one uniform number per sequence against the cumulative
distribution, instead of torch.multinomial, which on CPU draws one exponential variate per vocabulary entry per
sequence (N x V random numbers a decoding step; on a 50k vocabulary the step's largest cost after the forward).

The same distribution, softmax(logits / temperature) in float32 (what generate()'s own sampler draws from): a token
with probability p owns an interval of length p of the cumulative sums, and a zero-probability token owns none.
On a large vocabulary the search has two levels, so that nothing of vocabulary size is cumulated or held in
float64 (those N x V float64 buffers, allocated at every decoding step, were most of the draw's time): first the
block of BLOCK consecutive tokens whose cumulative mass reaches the target, then the token inside that block. The
blocks' masses and the chosen block's entries are cumulated in float64, so every positive probability keeps its
interval. Up to ONE_LEVEL_MAX entries one float64 cumulation over the vocabulary is the cheaper search, and on a GPU
always: there the N x V float64 buffer costs microseconds, while the second level's operations (about 30 a step) are
each a kernel launched from Python, which is what an eager decoding step on a GPU is bound by.
generate() has no hook for its sampler; `InverseCDFSampler` is the last logits processor of a greedy generate():
it draws the token and leaves it the only finite score, which the greedy step then takes.

Shapes: N sequences, V vocabulary, B blocks.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor

# the message torch.multinomial raises on such rows, which the engine turns into its one-line error
NOT_FINITE = "probability tensor contains either `inf`, `nan` or element < 0"
BLOCK = 256  # tokens per block of the first search level
ONE_LEVEL_MAX = 1 << 17  # N x V entries up to which one level is the cheaper search (on CPU: 32 x 4096)
SMALLEST = torch.finfo(torch.float64).tiny


def sample_inverse_cdf(logits: torch.Tensor, uniform: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row of logits (N,V), drawn from softmax(logits). uniform: N,1 float64 in [0, 1) (None:
    torch.rand). -> N"""
    return draw(torch.softmax(logits, dim=-1, dtype=torch.float32), uniform)


def draw(probs: torch.Tensor, uniform: torch.Tensor | None = None, finite: torch.Tensor | None = None,
         generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of probs (N,V; non-negative, rows summing to about 1). -> N
    finite: None, and non-finite probabilities raise here; or a bool tensor on probs' device that is set to False
    where they are not finite, so that a decoding step reads nothing back to the host (the caller checks it once;
    such a row's token is then some valid id, never used).
    generator: where the uniform numbers come from (None: torch's default generator)."""
    one_level = searches_in_one_level(probs)
    masses = (probs if one_level else block_masses(probs)).double()  # N,V or N,B
    cumulative = masses.cumsum(-1)  # non-decreasing
    total = cumulative[:, -1:]  # N,1  1 up to rounding
    if finite is None:
        if not bool(torch.isfinite(total).all()):
            raise RuntimeError(NOT_FINITE)
    else:
        finite.logical_and_(torch.isfinite(total).all())
    if uniform is None:
        uniform = torch.rand(total.shape, dtype=torch.float64, device=probs.device, generator=generator)  # [0, 1)
    target = (1 - uniform) * total  # (0, total]
    # the first token (block) reaching it: p > 0. Within range wherever the total is finite; the clamp keeps a
    # non-finite row's index valid too
    found = torch.searchsorted(cumulative, target).clamp_(max=cumulative.shape[-1] - 1)  # N,1
    if one_level:
        return found.squeeze(-1)
    return token_in_block(probs, masses, cumulative, found, target)


def searches_in_one_level(probs: torch.Tensor) -> bool:
    """Whether the draw cumulates the whole vocabulary at once: on a GPU, or up to ONE_LEVEL_MAX entries."""
    return probs.device.type == "cuda" or probs.numel() <= ONE_LEVEL_MAX


def token_in_block(probs: torch.Tensor, masses: torch.Tensor, cumulative: torch.Tensor, block: torch.Tensor,
                   target: torch.Tensor) -> torch.Tensor:
    """The second level: the token of `block` (N,1) where the cumulative distribution reaches target (N,1). -> N"""
    v = probs.shape[-1]
    before = cumulative.gather(-1, (block - 1).clamp(min=0)) * (block > 0)  # N,1  the mass of the blocks before
    columns = block * BLOCK + torch.arange(BLOCK, device=probs.device)  # N,BLOCK  past V: padding, probability 0
    inside = (probs.gather(-1, columns.clamp(max=v - 1)).double() * (columns < v)).cumsum(-1)  # N,BLOCK
    # the target's place in the block, rescaled from the block's mass to its entries' float64 sum (the two differ
    # by rounding); at least the smallest positive number and at most the sum, so the token found has p > 0
    offset = (target - before) / masses.gather(-1, block) * inside[:, -1:]
    offset = offset.clamp(min=SMALLEST).minimum(inside[:, -1:])
    return (columns.gather(-1, torch.searchsorted(inside, offset).clamp_(max=BLOCK - 1))).squeeze(-1)  # N


def block_masses(probs: torch.Tensor) -> torch.Tensor:
    """The probability of each block of BLOCK consecutive tokens (the last block may be shorter). -> N,B"""
    full = probs.shape[-1] - probs.shape[-1] % BLOCK
    masses = probs[:, :full].unflatten(-1, (full // BLOCK, BLOCK)).sum(-1)  # a view: no copy of the N,V probs
    if full < probs.shape[-1]:
        masses = torch.cat([masses, probs[:, full:].sum(-1, keepdim=True)], dim=-1)
    return masses


class InverseCDFSampler(LogitsProcessor):
    """Samples from softmax(scores / temperature) and returns scores where only the drawn token is finite.
    generator: the random stream of the draw (None: torch's default generator)."""

    def __init__(self, temperature: float, generator: torch.Generator | None = None):
        self.temperature, self.generator = temperature, generator
        self.finite: torch.Tensor | None = None  # on the device: whether every draw so far had finite probabilities

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        probs = torch.softmax(scores / self.temperature, dim=-1, dtype=torch.float32)  # N,V
        if self.finite is None:
            self.finite = torch.ones((), dtype=torch.bool, device=scores.device)
        tokens = draw(probs, finite=self.finite, generator=self.generator)  # N
        return probs.fill_(float("-inf")).scatter_(-1, tokens.unsqueeze(-1), 0.0)  # the probs' memory, reused

    def check(self) -> None:
        """After generate(): the one host read of the finiteness flag; raises what torch.multinomial raises."""
        if self.finite is not None and not bool(self.finite):
            raise RuntimeError(NOT_FINITE)
