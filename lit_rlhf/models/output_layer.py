"""The output layer that the chunked logprob paths multiply the last hidden states with, and whether that product is
the model's logits: some architectures change them after it (Gemma 2 and 3's final_logit_softcapping, Granite's
logits_scaling, Cohere's logit_scale, ...), and a product that skipped that would score tokens under another
distribution than the one generate() sampled from."""

from __future__ import annotations

import weakref

import torch

from lit_rlhf.models.probes import measured_once, probe_ids, unchanged

# logits_are_the_output_layers' verdict per model object
_VERDICTS: weakref.WeakKeyDictionary[torch.nn.Module, bool] = weakref.WeakKeyDictionary()
PROBE_TOKENS = (11, 12, 13, 14, 15, 16, 17, 18)
PROBE_POSITIONS = 4  # the last positions whose logits are compared


def plain_output_layer(model: torch.nn.Module) -> torch.nn.Linear | None:
    """The model's output projection when it is a plain Linear (not wrapped, e.g. by a LoRA adapter) whose output is
    the model's logits, else None: then the logits come from the model's own forward."""
    layer = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(layer) is not torch.nn.Linear:
        return None
    return layer if logits_are_the_output_layers(model) else None


def logits_are_the_output_layers(model: torch.nn.Module) -> bool:
    """Whether the model's logits are its output layer applied to its last hidden states and nothing more, judged by
    what it does (one forward of 8 tokens, once per model; probes.measured_once). Where they are not, warns once."""
    def measure() -> bool:
        out = model(input_ids=probe_ids(model, PROBE_TOKENS), use_cache=False, logits_to_keep=PROBE_POSITIONS,
                    output_hidden_states=True)
        ours = model.get_output_embeddings()(out.hidden_states[-1][:, -PROBE_POSITIONS:])  # 1,4,V
        return unchanged(ours, out.logits)

    return measured_once(_VERDICTS, model, measure,
                         "algo.logits_chunk_size: the {model} model changes its logits after its output layer (e.g. "
                         "a softcap or a scale), so its logprobs come from its own forward's full logits, (sequences, "
                         "positions, vocabulary) at once: lower algo.forward_batch_size if they do not fit.")
