"""Gradient reduce-scatter between CPU ranks (gloo) in pieces, for FSDP2's `set_custom_reduce_scatter`.

gloo has no reduce-scatter of its own: torch runs it as an all-reduce of a whole-size copy of the input, so a
unit's reduce-scatter holds, beside FSDP's whole-size input buffer and the rank's output, one more whole copy of
the unit's gradient (on a model with a large vocabulary, the input embeddings' and head's are the largest). Here
each rank keeps its own chunk of the input and exchanges the others' chunks with its peers point to point, one
piece of at most `PIECE_BYTES` at a time, adding each received piece into its output: the transient is one piece.

The sum runs in a fixed order on every rank (its own chunk, then each peer's by distance), so results are
reproducible; with two ranks a + b is b + a to the last bit, so the gradients equal gloo's own reduce-scatter.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

PIECE_BYTES = 16 * 2**20
# torch's own reduce-scatter: reduce_scatter_single from torch 2.13 on, which deprecates the older name
torch_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class PiecewiseReduceScatter:
    """FSDP2's ReduceScatter interface (`allocate`, `__call__`) for SUM and AVG on CPU tensors; any other
    reduction goes to torch's own reduce-scatter."""

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup,
                 op, async_op: bool = False):
        if op not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG) or async_op:
            return torch_reduce_scatter(output_tensor, input_tensor, op=op, group=group, async_op=async_op)
        reduce_scatter_in_pieces(output_tensor, input_tensor, group, average=op == dist.ReduceOp.AVG)
        return None


def reduce_scatter_in_pieces(output: torch.Tensor, input: torch.Tensor, group: dist.ProcessGroup | None = None,
                             average: bool = False) -> None:
    """output (numel n) = the sum (average) over ranks of chunk `rank` of input (numel world_size * n)."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    chunks, out = input.view(world, -1), output.view(-1)
    out.copy_(chunks[rank])
    piece = max(1, PIECE_BYTES // input.element_size())
    received = torch.empty(min(piece, out.numel()), dtype=out.dtype)
    for distance in range(1, world):
        to, source = (rank + distance) % world, (rank - distance) % world  # ranks within the group
        for start in range(0, out.numel(), piece):
            end = min(start + piece, out.numel())
            exchange = [dist.P2POp(dist.isend, chunks[to][start:end], global_rank(group, to), group),
                        dist.P2POp(dist.irecv, received[: end - start], global_rank(group, source), group)]
            for request in dist.batch_isend_irecv(exchange):
                request.wait()
            out[start:end] += received[: end - start]
    if average:
        out.div_(world)


def global_rank(group: dist.ProcessGroup | None, group_rank: int) -> int:
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def use_piecewise_reduce_scatter(units) -> None:
    """Every FSDP unit's gradients reduce-scattered in pieces (for units whose mesh is on the CPU)."""
    for unit in units:
        if hasattr(unit, "set_custom_reduce_scatter"):  # torch >= 2.7
            unit.set_custom_reduce_scatter(PiecewiseReduceScatter())
