"""The output layer that the chunked logprob paths multiply the last hidden states with, and whether that product is
the model's logits: some architectures change them after it (Gemma 2 and 3's final_logit_softcapping, Granite's
logits_scaling, Cohere's logit_scale, ...), and a product that skipped that would score tokens under another
distribution than the one generate() sampled from. With model.cast_lm_head_to_fp32 the output layer is kept and
computed in float32 (Float32OutputLayer)."""

from __future__ import annotations

import weakref

import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.models.last_hidden import forward_with_last_hidden
from lit_rlhf.models.probes import measured_once, probe_ids, unchanged

# logits_are_the_output_layers' verdict per model object
_VERDICTS: weakref.WeakKeyDictionary[torch.nn.Module, bool] = weakref.WeakKeyDictionary()
PROBE_TOKENS = (11, 12, 13, 14, 15, 16, 17, 18)
PROBE_POSITIONS = 4  # the last positions whose logits are compared


def plain_output_layer(model: torch.nn.Module) -> torch.nn.Linear | None:
    """The model's output projection when it is a plain Linear (not wrapped, e.g. by a LoRA adapter) whose output is
    the model's logits, else None: then the logits come from the model's own forward."""
    layer = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(layer) not in (torch.nn.Linear, Float32OutputLayer):
        return None
    return layer if logits_are_the_output_layers(model) else None


def logits_are_the_output_layers(model: torch.nn.Module) -> bool:
    """Whether the model's logits are its output layer applied to its last hidden states and nothing more, judged by
    what it does (one forward of 8 tokens, once per model; probes.measured_once). Where they are not, warns once."""
    def measure() -> bool:
        out, hidden = forward_with_last_hidden(model, input_ids=probe_ids(model, PROBE_TOKENS), use_cache=False,
                                               logits_to_keep=PROBE_POSITIONS)
        ours = model.get_output_embeddings()(hidden[:, -PROBE_POSITIONS:])  # 1,4,V
        return unchanged(ours, out.logits)

    return measured_once(_VERDICTS, model, measure,
                         "algo.logits_chunk_size: the {model} model changes its logits after its output layer (e.g. "
                         "a softcap or a scale), so its logprobs come from its own forward's full logits, (sequences, "
                         "positions, vocabulary) at once: lower algo.forward_batch_size if they do not fit.")


FLOAT32_HEAD_UNDER_FSDP2 = ("model.cast_lm_head_to_fp32=true is not supported with trainer=fsdp2 (a sharded unit "
                            "holds one dtype, and the output layer shares one with the final norm); use trainer=ddp "
                            "or set model.cast_lm_head_to_fp32=false.")


class Float32OutputLayer(torch.nn.Linear):
    """An output layer whose weights and logits are float32 whatever the model's dtype (model.cast_lm_head_to_fp32,
    TRL's name; ScaleRL's float32 LM head): its input is cast up and autocast is off inside it, so the softmax over
    the vocabulary starts from float32 logits rather than bfloat16 ones."""

    computes_in_float32 = True  # what the chunked logprob paths (ops/logprobs.py) read

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(hidden.device.type, enabled=False):
            return super().forward(hidden.to(self.weight.dtype))


def cast_output_layer_to_float32(model: torch.nn.Module, key: str) -> None:
    """model's output layer (a plain Linear) in float32, in place; tied input embeddings share its weight, so their
    table is float32 too and their output is cast back to the model's dtype (as TRL's cast_lm_head_to_fp32)."""
    layer = model.get_output_embeddings()
    if type(layer) is not torch.nn.Linear:
        raise ConfigError(f"model.cast_lm_head_to_fp32=true: the output layer of {key} is a {type(layer).__name__}, "
                          f"not a plain Linear; set model.cast_lm_head_to_fp32=false.")
    dtype = layer.weight.dtype
    layer.float()  # in place: the Parameter stays the one tied embeddings hold
    layer.__class__ = Float32OutputLayer  # the same module (names, hooks, tying) with the float32 forward
    embeddings = model.get_input_embeddings()
    if embeddings is not None and embeddings.weight is layer.weight and dtype != torch.float32:
        embeddings.register_forward_hook(lambda module, args, output: output.to(dtype))


def check_float32_output_layer(model: torch.nn.Module) -> None:
    """With model.cast_lm_head_to_fp32, the output layer must not carry a LoRA adapter (its float32 forward would be
    one branch of the adapter's), as TRL refuses it."""
    layer = model.get_output_embeddings()
    if any(isinstance(module, Float32OutputLayer) for module in model.modules()) and \
            type(layer) is not Float32OutputLayer:
        raise ConfigError("model.cast_lm_head_to_fp32=true with a LoRA adapter on the output layer "
                          "(model.lora.target_modules names it): remove it from target_modules, or set "
                          "model.cast_lm_head_to_fp32=false.")
