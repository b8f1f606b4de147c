"""Padding-free forwards: the real tokens of each sequence (its prompt without left padding, its response up to
the stop token) packed into rows, several sequences per row, positions restarting at 0 for each. Transformers
treats position ids that restart, without an attention mask, as packed sequences and keeps them apart (a block
diagonal causal mask; varlen kernels where the attention backend has them).

Rows hold at most the longest sequence of the batch (first-fit decreasing), so attention never spans more than
the padded layout would, and the pad tokens of left-padded prompts and of responses that stopped early are not
computed. Not every architecture keeps the sequences of a row apart (OPT and BLOOM build their mask from an
attention mask of ones, so each sequence would attend to the ones before it): keeps_packed_sequences_apart checks
what a model does before its first padding-free forward, and forwards.py uses the padded layout where it does not.

Shapes: N sequences, P prompt length, R response length, T real response tokens, L row length, H hidden.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from lit_rlhf.models.last_hidden import forward_with_last_hidden
from lit_rlhf.models.probes import measured_once, probe_ids, unchanged
from lit_rlhf.models.router_load import RouterLoad

# keeps_packed_sequences_apart's verdict per model object
_VERDICTS: weakref.WeakKeyDictionary[torch.nn.Module, bool] = weakref.WeakKeyDictionary()
# the probe: one sequence packed after two different ones
PROBE_FIRSTS = ((11, 12, 13, 14), (21, 22, 23, 24))
PROBE_SECOND = (31, 32, 33, 34)


@dataclass
class Packed:
    input_ids: torch.Tensor  # rows,L
    position_ids: torch.Tensor  # rows,L  restarting at 0 for every sequence (and for the padding at a row's end)
    rows: torch.Tensor  # T  the row of the position that predicts each real response token (in responses[mask] order)
    columns: torch.Tensor  # T  its column
    real: torch.Tensor  # rows,L  the packed sequences' tokens (False: the filler at a row's end)


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
    index, positions, real, start_of = [], [], [], {}
    for row, members in enumerate(bins):
        offset = 0
        for i in members:
            index += sources[i]
            positions += range(len(sources[i]))
            start_of[i] = (row, offset)
            offset += len(sources[i])
        index += [pad] * (capacity - offset)
        positions += range(capacity - offset)  # the padding: apart
        real += [True] * offset + [False] * (capacity - offset)
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
    return Packed(input_ids, position_ids, torch.tensor(rows, **on_device), torch.tensor(columns, **on_device),
                  torch.tensor(real, device=queries.device).view(len(bins), capacity))


def packed_response_hidden(model: torch.nn.Module, queries, query_mask, responses, response_mask,
                           pad_token_id: int, router_load: RouterLoad | None = None) -> torch.Tensor:
    """The last hidden states that predict each real response token, from one padding-free forward; router_load
    collects a MoE policy's load-balancing loss over the packed tokens (not a row's filler). -> (T,H)"""
    packed = pack(queries, query_mask, responses, response_mask, pad_token_id)
    if router_load is None:
        hidden = last_hidden(model, packed.input_ids, packed.position_ids)
    else:
        out, hidden = forward_with_last_hidden(model, input_ids=packed.input_ids, position_ids=packed.position_ids,
                                               use_cache=False, logits_to_keep=1, **router_load.forward_kwargs)
        router_load.add(out, packed.real)
    return hidden[packed.rows, packed.columns]  # T,H


def last_hidden(model: torch.nn.Module, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
    """The last layer's hidden states of packed rows (rows,L,H): no attention mask, positions restarting."""
    return forward_with_last_hidden(model, input_ids=input_ids, position_ids=position_ids, use_cache=False,
                                    logits_to_keep=1)[1]


def keeps_packed_sequences_apart(model: torch.nn.Module) -> bool:
    """Whether the model's forward keeps the sequences packed into a row apart, judged by what it does: a sequence
    packed after two different ones must get the same last hidden states (two forwards of 8 tokens, once per model;
    probes.measured_once). Transformers keeps them apart for the architectures that build their mask from the
    position ids (GPT-NeoX, Llama, Qwen2, Gemma, GPT-2, ...), not for OPT or BLOOM: each sequence would attend to
    the ones before it in its row (a random OPT's hidden states move by a tenth of their size). Where it does not,
    warns once: the caller then uses the padded layout."""
    def measure() -> bool:
        rows = [probe_ids(model, head + PROBE_SECOND) for head in PROBE_FIRSTS]  # 1,8 each
        positions = torch.arange(8, device=rows[0].device).remainder(4).unsqueeze(0)  # 0..3 twice: two sequences
        first, other = (last_hidden(model, row, positions)[0, 4:] for row in rows)  # 4,H each: the second's
        return unchanged(first, other)

    return measured_once(_VERDICTS, model, measure,
                         "algo.padding_free: the {model} model lets a sequence packed into a row attend to the ones "
                         "before it (its attention mask is not built from the restarting position ids), so its "
                         "forwards use the padded layout; set algo.padding_free=false to skip this check.")
