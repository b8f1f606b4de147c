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
    prompt_lengths = query_mask.sum(1).tolist()  # N
    response_lengths = response_mask.sum(1).tolist()  # N
    sequences = [torch.cat([q[m.bool()], r[:n]]) for q, m, r, n in
                 zip(queries, query_mask, responses, response_lengths, strict=True)]
    capacity = max(len(s) for s in sequences)
    bins: list[list[int]] = []  # sequence indices per row
    free: list[int] = []
    for i in sorted(range(len(sequences)), key=lambda i: -len(sequences[i])):  # first-fit decreasing
        row = next((b for b, room in enumerate(free) if room >= len(sequences[i])), None)
        if row is None:
            bins.append([])
            free.append(capacity)
            row = len(bins) - 1
        bins[row].append(i)
        free[row] -= len(sequences[i])
    input_ids = torch.full((len(bins), capacity), pad_token_id, dtype=queries.dtype, device=queries.device)
    position_ids = torch.zeros((len(bins), capacity), dtype=torch.long, device=queries.device)
    start_of = {}
    for row, members in enumerate(bins):
        offset = 0
        for i in members:
            length = len(sequences[i])
            input_ids[row, offset:offset + length] = sequences[i]
            position_ids[row, offset:offset + length] = torch.arange(length, device=queries.device)
            start_of[i] = (row, offset)
            offset += length
        position_ids[row, offset:] = torch.arange(capacity - offset, device=queries.device)  # the padding: apart
    rows, columns = [], []
    for i in range(len(sequences)):  # responses[mask] order: sequence by sequence, token by token
        row, offset = start_of[i]
        first = offset + prompt_lengths[i] - 1  # the position that predicts the first response token
        rows += [row] * response_lengths[i]
        columns += range(first, first + response_lengths[i])
    index = dict(dtype=torch.long, device=queries.device)
    return Packed(input_ids, position_ids, torch.tensor(rows, **index), torch.tensor(columns, **index))


def packed_response_hidden(model: torch.nn.Module, queries, query_mask, responses, response_mask,
                           pad_token_id: int) -> torch.Tensor:
    """The last hidden states that predict each real response token, from one padding-free forward. -> (T,H)"""
    packed = pack(queries, query_mask, responses, response_mask, pad_token_id)
    out = model(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False, logits_to_keep=1,
                output_hidden_states=True)
    return out.hidden_states[-1][packed.rows, packed.columns]  # T,H
