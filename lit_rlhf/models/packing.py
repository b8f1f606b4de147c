"""Padding-free forwards: the real tokens of each sequence (its prompt without left padding, its response up to
the stop token) packed into rows, several sequences per row, positions restarting at 0 for each. Transformers
treats position ids that restart, without an attention mask, as packed sequences and keeps them apart (a block
diagonal causal mask; varlen kernels where the attention backend has them).

Rows hold at most the longest sequence of the batch (first-fit decreasing), so attention never spans more than
the padded layout would, and the pad tokens of left-padded prompts and of responses that stopped early are not
computed.

Shapes: N sequences, P prompt length, R response length, T real response tokens, L row length, H hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Packed:
    input_ids: torch.Tensor  # rows,L
    position_ids: torch.Tensor  # rows,L  restarting at 0 for every sequence (and for the padding at a row's end)
    rows: torch.Tensor  # T  the row of the position that predicts each real response token (in responses[mask] order)
    columns: torch.Tensor  # T  its column


def pack(queries: torch.Tensor, query_mask: torch.Tensor, responses: torch.Tensor, response_mask: torch.Tensor,
         pad_token_id: int) -> Packed:
    """The layout is planned on the host from one read of the masks; the packed rows are then one gather of the
    tokens on the device (no per-sequence copies, no boolean indexing, which reads back a size per sequence)."""
    n, p = queries.shape
    width = p + responses.shape[1]  # of a sequence's row in tokens = [queries | responses]
    masks = torch.cat([query_mask.long(), response_mask.sum(1, keepdim=True).long()], 1).tolist()  # N x (P+1)
    prompt_lengths, response_lengths, sources = [], [], []  # per sequence: its tokens' flat indices in tokens
    for i, row in enumerate(masks):
        prompt = [i * width + c for c, keep in enumerate(row[:p]) if keep]
        sources.append(prompt + [i * width + p + c for c in range(row[p])])  # the response up to the stop
        prompt_lengths.append(len(prompt))
        response_lengths.append(row[p])
    capacity = max(len(s) for s in sources)
    bins: list[list[int]] = []  # sequence indices per row
    free: list[int] = []
    for i in sorted(range(n), key=lambda i: -len(sources[i])):  # first-fit decreasing
        row = next((b for b, room in enumerate(free) if room >= len(sources[i])), None)
        if row is None:
            bins.append([])
            free.append(capacity)
            row = len(bins) - 1
        bins[row].append(i)
        free[row] -= len(sources[i])
    pad = n * width  # the index of the pad token appended after the tokens
    index, positions, start_of = [], [], {}
    for row, members in enumerate(bins):
        offset = 0
        for i in members:
            index += sources[i]
            positions += range(len(sources[i]))
            start_of[i] = (row, offset)
            offset += len(sources[i])
        index += [pad] * (capacity - offset)
        positions += range(capacity - offset)  # the padding: apart
    rows, columns = [], []
    for i in range(n):  # responses[mask] order: sequence by sequence, token by token
        row, offset = start_of[i]
        first = offset + prompt_lengths[i] - 1  # the position that predicts the first response token
        rows += [row] * response_lengths[i]
        columns += range(first, first + response_lengths[i])
    on_device = dict(dtype=torch.long, device=queries.device)
    tokens = torch.cat([queries, responses.to(queries.dtype)], 1).flatten()  # N*(P+R)
    tokens = torch.cat([tokens, tokens.new_full((1,), pad_token_id)])
    input_ids = tokens[torch.tensor(index, **on_device)].view(len(bins), capacity)
    position_ids = torch.tensor(positions, **on_device).view(len(bins), capacity)
    return Packed(input_ids, position_ids, torch.tensor(rows, **on_device), torch.tensor(columns, **on_device))


def packed_response_hidden(model: torch.nn.Module, queries, query_mask, responses, response_mask,
                           pad_token_id: int) -> torch.Tensor:
    """The last hidden states that predict each real response token, from one padding-free forward. -> (T,H)"""
    packed = pack(queries, query_mask, responses, response_mask, pad_token_id)
    out = model(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False, logits_to_keep=1,
                output_hidden_states=True)
    return out.hidden_states[-1][packed.rows, packed.columns]  # T,H
