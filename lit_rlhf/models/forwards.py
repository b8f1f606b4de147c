"""The forward passes that score tokens: the logprobs (and the entropy, or other statistics) of a response under a
causal LM, chunked through the output layer, padding-free or padded, temperature-aware. One function for the RL
modules' old, reference and update forwards, a teacher's, DPO's, SFT's and the reward model's trainer.

Shapes: N sequences, P prompt length, R response length, T target tokens, V vocab, H hidden.
"""

from __future__ import annotations

import torch

from lit_rlhf.models.last_hidden import forward_with_last_hidden
from lit_rlhf.models.output_layer import plain_output_layer
from lit_rlhf.models.packing import keeps_packed_sequences_apart, packed_response_hidden
from lit_rlhf.models.router_load import RouterLoad
from lit_rlhf.ops.logprobs import (
    chunked_logprobs_and_statistics,
    kept_logits_mib,
    logprobs_and_statistics,
    logprobs_from_logits,
    output_layer_dtype,
)


def sequence_inputs(queries: torch.Tensor, query_mask: torch.Tensor, responses: torch.Tensor,
                    response_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Model inputs for prompt + response. Position ids count real tokens only, as generate() does
    for left-padded prompts, so that a forward sees the tokens where they were sampled."""
    attention_mask = torch.cat([query_mask, response_mask.to(query_mask.dtype)], dim=1)  # N,P+R
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)  # N,P+R
    return {"input_ids": torch.cat([queries, responses], dim=1), "attention_mask": attention_mask,
            "position_ids": position_ids}


def response_forward(model: torch.nn.Module, queries, query_mask, responses, response_mask,
                     with_hidden: bool = False, router_load: RouterLoad | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logits that predict each response token (N,R,V) and, if asked, the last hidden states at
    those positions (N,R,H): the states a value head reads before each response token. router_load: a MoE policy's
    collector of the forward's load-balancing loss."""
    length = responses.shape[1]
    inputs = dict(sequence_inputs(queries, query_mask, responses, response_mask), use_cache=False,
                  logits_to_keep=length + 1, **(router_load.forward_kwargs if router_load is not None else {}))
    out, hidden = forward_with_last_hidden(model, **inputs) if with_hidden else (model(**inputs), None)
    if router_load is not None:
        router_load.add(out, inputs["attention_mask"])
    return out.logits[:, :-1], None if hidden is None else hidden[:, -(length + 1):-1]  # N,R,V and N,R,H


def response_logits(model: torch.nn.Module, queries, query_mask, responses, response_mask) -> torch.Tensor:
    """Logits that predict each response token. -> (N,R,V)"""
    return response_forward(model, queries, query_mask, responses, response_mask)[0]


def response_logprobs_and_entropy(model: torch.nn.Module, queries, query_mask, responses, response_mask,
                                  temperature: float, chunk_size: int | None, pad_token_id: int | None = None,
                                  logits_budget_mib: float | None = None, with_entropy: bool = True, *,
                                  router_load: RouterLoad | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs (N,R) and entropy (N,R, no gradient; None unless with_entropy) of the response tokens; zero after the
    stop token (response_logprobs_and_statistics)."""
    logprobs, statistics = response_logprobs_and_statistics(model, queries, query_mask, responses, response_mask,
                                                            temperature, chunk_size, pad_token_id, logits_budget_mib,
                                                            ("entropy",) if with_entropy else (),
                                                            router_load=router_load)
    return logprobs, statistics.get("entropy")


def response_logprobs_and_statistics(model: torch.nn.Module, queries, query_mask, responses, response_mask,
                                     temperature: float, chunk_size: int | None, pad_token_id: int | None = None,
                                     logits_budget_mib: float | None = None, statistics: tuple[str, ...] = (), *,
                                     router_load: RouterLoad | None = None
                                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logprobs (N,R) of the response tokens and the named ops.logprobs.TOKEN_STATISTICS there (N,R each, no
    gradient); zero after the stop token. With chunk_size and a pad_token_id, from a padding-free forward
    (models.packing) where the model keeps packed sequences apart; otherwise as last_tokens_logprobs_and_statistics
    computes them. router_load: a MoE policy's collector of the forward's load-balancing loss (training forwards)."""
    layer = plain_output_layer(model) if chunk_size else None
    if layer is None or pad_token_id is None or not keeps_packed_sequences_apart(model):
        return last_tokens_logprobs_and_statistics(model, sequence_inputs(queries, query_mask, responses,
                                                                          response_mask),
                                                   responses, response_mask, temperature, chunk_size,
                                                   logits_budget_mib, statistics, router_load=router_load)
    real = response_mask.bool()  # N,R
    hidden = packed_response_hidden(model, queries, query_mask, responses, response_mask, pad_token_id,
                                    router_load)  # T,H
    return chunked_on_real_tokens(hidden, layer, responses, real, temperature, chunk_size, logits_budget_mib,
                                  statistics)


def right_padded_logprobs_and_statistics(model: torch.nn.Module, input_ids: torch.Tensor,
                                         attention_mask: torch.Tensor, target_mask: torch.Tensor,
                                         chunk_size: int | None, pad_token_id: int | None = None,
                                         logits_budget_mib: float | None = None, statistics: tuple[str, ...] = (),
                                         *, router_load: RouterLoad | None = None
                                         ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logprobs (N,L-1) of every token after the first of right-padded sequences (N,L), each predicted by the
    position before it, and the named ops.logprobs.TOKEN_STATISTICS there; zero outside target_mask (N,L-1, within
    the real tokens; temperature 1). The forward of DPO's pairs and SFT's rows. With chunk_size and a pad_token_id,
    from a padding-free forward (models.packing) where the model keeps packed sequences apart: the rows' real tokens
    packed, no padding computed; otherwise as last_tokens_logprobs_and_statistics computes them."""
    targets = input_ids[:, 1:]  # N,L-1
    layer = plain_output_layer(model) if chunk_size else None
    if layer is None or pad_token_id is None or not keeps_packed_sequences_apart(model):
        return last_tokens_logprobs_and_statistics(model, {"input_ids": input_ids, "attention_mask": attention_mask},
                                                   targets, target_mask, 1.0, chunk_size, logits_budget_mib,
                                                   statistics, router_load=router_load)
    real = attention_mask[:, 1:].bool()  # N,L-1  right-padded: each row's real tokens come first
    # the first token as a one-token prompt, the rest as its response: the states that predict every real token
    hidden = packed_response_hidden(model, input_ids[:, :1], attention_mask[:, :1], targets, real, pad_token_id,
                                    router_load)
    targeted = target_mask.bool()
    return chunked_on_real_tokens(hidden[targeted[real]], layer, targets, targeted, 1.0, chunk_size,
                                  logits_budget_mib, statistics)


def last_tokens_logprobs_and_entropy(model: torch.nn.Module, inputs: dict[str, torch.Tensor], targets: torch.Tensor,
                                     target_mask: torch.Tensor, temperature: float, chunk_size: int | None,
                                     logits_budget_mib: float | None = None,
                                     with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs (N,T) and entropy (N,T, no gradient; None unless with_entropy) of `targets` (N,T)
    (last_tokens_logprobs_and_statistics). The one logprob forward of the RL modules."""
    logprobs, statistics = last_tokens_logprobs_and_statistics(model, inputs, targets, target_mask, temperature,
                                                                chunk_size, logits_budget_mib,
                                                                ("entropy",) if with_entropy else ())
    return logprobs, statistics.get("entropy")


def last_tokens_logprobs_and_statistics(model: torch.nn.Module, inputs: dict[str, torch.Tensor],
                                        targets: torch.Tensor, target_mask: torch.Tensor, temperature: float,
                                        chunk_size: int | None, logits_budget_mib: float | None = None,
                                        statistics: tuple[str, ...] = (), *, router_load: RouterLoad | None = None
                                        ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logprobs (N,T) of `targets` (N,T), the last T tokens of the sequences `inputs` (N,L) feed the model, each
    predicted by the position before it, and the named ops.logprobs.TOKEN_STATISTICS there (N,T each, no gradient);
    zero outside target_mask (N,T). The logprob forward of the RL modules, of DPO and SFT; logits divided by
    `temperature`.

    With chunk_size, from the last hidden states of the target tokens, chunk_size positions at a time
    (ops.chunked_logprobs_and_statistics): the (N,T,V) logits are never held. With gradients, the chunks' logits are
    kept for the backward pass when they fit logits_budget_mib (ops.kept_logits_mib), else recomputed there (None:
    always recomputed). Without chunk_size, when the output layer is not a plain Linear (e.g. it carries an
    adapter), or when the model changes its logits after it (output_layer.plain_output_layer), from the full
    logits."""
    length = targets.shape[1]
    layer = plain_output_layer(model) if chunk_size else None
    routed = router_load.forward_kwargs if router_load is not None else {}
    if layer is None:
        out = model(**inputs, use_cache=False, logits_to_keep=length + 1, **routed)
        if router_load is not None:
            router_load.add(out, inputs["attention_mask"])
        logits = out.logits[:, :-1]  # N,T,V
        mask = target_mask.to(torch.float32)
        if not statistics:
            return logprobs_from_logits(logits, targets, temperature) * mask, {}
        logprobs, values = logprobs_and_statistics(logits, targets, temperature, statistics)
        return logprobs * mask, {name: value * mask for name, value in values.items()}
    real = target_mask.bool()  # N,T
    out, hidden = forward_with_last_hidden(model, **inputs, use_cache=False, logits_to_keep=1, **routed)
    if router_load is not None:
        router_load.add(out, inputs["attention_mask"])
    hidden = hidden[:, -(length + 1):-1][real]  # M,H  the states that predict the target tokens
    return chunked_on_real_tokens(hidden, layer, targets, real, temperature, chunk_size, logits_budget_mib,
                                  statistics)


def chunked_on_real_tokens(hidden: torch.Tensor, layer: torch.nn.Linear, targets: torch.Tensor, real: torch.Tensor,
                           temperature: float, chunk_size: int, logits_budget_mib: float | None,
                           statistics: tuple[str, ...]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logprobs and the named statistics (N,T) of the real target tokens (real: N,T) from their predicting hidden
    states (M,H)."""
    kept_mib = kept_logits_mib(len(hidden), layer.out_features, output_layer_dtype(hidden, layer).itemsize)
    recompute = logits_budget_mib is None or kept_mib > logits_budget_mib
    token_logprobs, token_statistics = chunked_logprobs_and_statistics(hidden, layer, targets[real], temperature,
                                                                       chunk_size, recompute, statistics)  # M ; M
    logprobs = token_logprobs.new_zeros(real.shape).masked_scatter(real, token_logprobs)
    return logprobs, {name: value.new_zeros(real.shape).masked_scatter(real, value)
                      for name, value in token_statistics.items()}  # N,T ; N,T


@torch.no_grad()
def batched_logprobs(model: torch.nn.Module, queries, query_mask, responses, response_mask,
                     temperature: float, batch_size: int | None = None, chunk_size: int | None = None,
                     pad_token_id: int | None = None) -> torch.Tensor:
    """No-grad logprobs of the responses, in chunks of batch_size sequences; zero after the stop token. -> (N,R)"""
    chunks = []
    step = batch_size or len(responses)
    for i in range(0, len(responses), step):
        s = slice(i, i + step)
        chunks.append(response_logprobs_and_entropy(model, queries[s], query_mask[s], responses[s], response_mask[s],
                                                    temperature, chunk_size, pad_token_id, with_entropy=False)[0])
    return torch.cat(chunks)
