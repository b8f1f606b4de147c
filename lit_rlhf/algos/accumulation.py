"""A token-mean loss under gradient accumulation, as TRL computes it with num_items_in_batch: the loss of an optimizer
step made of k micro-batches (Lightning's accumulate_grad_batches) on R ranks is

    (sum over the tokens of all k x R micro-batches of each token's loss) / (the tokens of all of them)

so every token weighs the same, however the tokens fall into micro-batches. The mean of each micro-batch's own mean
would weigh a short micro-batch's tokens more.

transformers counts the window's tokens before its first forward; Lightning hands the module one micro-batch at a
time, so the count is known only at the window's last. Micro-batch j's loss is therefore taken over the tokens so far,
N_j, and the gradients summed before it are multiplied by N_(j-1) / N_j before its backward: after the last
micro-batch the gradients are exactly those of the whole window's token mean (clipping and the optimizer see them
as they are)."""

from __future__ import annotations

from collections.abc import Iterable

import torch


class TokenMeanOverWindow:
    """loss() for each training micro-batch, then rescale_gradients() before its backward (on_before_backward)."""

    def __init__(self):
        self.tokens = 0  # every rank's tokens of the window so far
        self.factor: float | None = None  # for the gradients summed so far, before this micro-batch's backward

    def loss(self, total: torch.Tensor, tokens: int, ranks: int, accumulate: int, first: bool) -> torch.Tensor:
        """total: this rank's summed token losses of the micro-batch; tokens: every rank's tokens of it; first: the
        micro-batch opens a window (its gradients start from zero). The loss to return to Lightning, which divides it
        by `accumulate`, and whose gradients DDP averages over the `ranks`."""
        before = 0 if first else self.tokens
        self.tokens = before + tokens
        self.factor = before / self.tokens if before else None
        return total * ranks * accumulate / max(self.tokens, 1)

    def rescale_gradients(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        """The gradients of the window's micro-batches so far, from the mean over their tokens to the mean over these
        and the coming micro-batch's."""
        if self.factor is not None and self.factor != 1:
            for parameter in parameters:
                if parameter.grad is not None:
                    parameter.grad.mul_(self.factor)
        self.factor = None
