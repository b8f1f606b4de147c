"""The last hidden states of a forward: the ones the output layer multiplies, read from the model's decoder by a
forward hook rather than asked for with output_hidden_states=True. That flag makes the model return every layer's
input as well, which the output then keeps alive (L+1 tensors of (rows,L,H) held to the end of a no-grad forward
that would otherwise free them layer by layer); under trainer=fsdp2 those inputs are the views FSDP2 makes of each
sharded block's input, and FSDP2 warns, once per rank, that the root module returned a view tensor.

Shapes: rows, L positions, H hidden.
"""

from __future__ import annotations

import torch


def forward_with_last_hidden(model: torch.nn.Module, **inputs) -> tuple[object, torch.Tensor]:
    """The model's output for `inputs` and the last hidden states (rows,L,H) its decoder returned. A model without
    a decoder of its own answers with output_hidden_states=True instead: one whose get_decoder() is the model itself,
    or (Llama 4) the causal LM under the peft wrapper, output layer included."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    holds_output_layer = hasattr(decoder, "get_output_embeddings") and decoder.get_output_embeddings() is not None
    if decoder is model or getattr(decoder, "base_model", None) is model or holds_output_layer:
        out = model(**inputs, output_hidden_states=True)
        return out, out.hidden_states[-1]
    captured: list[torch.Tensor] = []
    handle = decoder.register_forward_hook(lambda module, args, output: captured.append(output[0]))
    try:
        out = model(**inputs)
    finally:
        handle.remove()
    if not captured:  # a forward that does not go through get_decoder()'s module
        out = model(**inputs, output_hidden_states=True)
        return out, out.hidden_states[-1]
    return out, captured[-1]
