"""The part of a model that text prompts go through. A multimodal checkpoint (Gemma 3's, Qwen2.5-VL's, LLaVA's) loads
as its ...ForConditionalGeneration, a vision tower and its projector beside the text decoder; text-only training
never reaches them, so they get no adapters (lora_targets.py) and, in a full fine-tune, are frozen: parameters
without a gradient would stop trainer=ddp on DDP's unused parameters. Some of these models' training forwards also ask
which tokens are image tokens, and raise without the answer: text prompts are marked as text."""

from __future__ import annotations

import inspect

import torch
from lightning.pytorch.utilities import rank_zero_info


def towers_beside_the_text_decoder(model: torch.nn.Module) -> dict[str, str]:
    """The modules of the model's base model that are not its text decoder (a vision tower and its projector on
    Gemma 3's and Qwen2.5-VL's checkpoints), by name prefix: text prompts never reach them. Empty for a text model."""
    base = getattr(model, "base_model", model)
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if decoder is None or decoder is model or decoder is base:
        return {}
    names = {id(module): name for name, module in model.named_modules()}
    if id(base) not in names or id(decoder) not in names:
        return {}
    base_name, decoder_name = names[id(base)], names[id(decoder)]
    prefix = f"{base_name}." if base_name else ""
    return {f"{prefix}{child}.": child for child, _ in base.named_children()
            if not f"{decoder_name}.".startswith(f"{prefix}{child}.")}  # neither the decoder nor holding it


def freeze_towers_beside_the_text_decoder(model: torch.nn.Module) -> None:
    """A full fine-tune trains the text decoder and the output layer, not a vision tower the prompts never reach."""
    towers = towers_beside_the_text_decoder(model)
    for prefix in towers:
        model.get_submodule(prefix.removesuffix(".")).requires_grad_(False)
    if towers:
        rank_zero_info(f"model.lora=null: the model's {', '.join(towers.values())} stay frozen (outside the text "
                       f"decoder, which the prompts go through).")


# inputs marking each token as text (0) or image (1): a training forward raises without them on Gemma 3 at
# transformers 5.5 (token_type_ids); other multimodal models of transformers name them mm_token_type_ids
TOKEN_KIND_INPUTS = ("token_type_ids", "mm_token_type_ids")


def mark_prompts_as_text(model: torch.nn.Module) -> None:
    """On a multimodal model whose base model takes such marks, a training forward given none marks every token as
    text (zeros: the causal mask of a text model, the same logits where the marks are optional)."""
    if not towers_beside_the_text_decoder(model):
        return
    base = model.base_model
    inputs = [name for name in TOKEN_KIND_INPUTS if name in inspect.signature(base.forward).parameters]
    if inputs:
        base.register_forward_pre_hook(TextMarks(inputs), with_kwargs=True)


class TextMarks:
    """A forward pre-hook (a class, so that a deep copy of the model keeps its own): zeros for the marks not given."""

    def __init__(self, inputs: list[str]):
        self.inputs = inputs

    def __call__(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        embeds = kwargs.get("inputs_embeds")
        if not module.training or (input_ids is None and embeds is None):
            return None
        shape, device = (input_ids.shape, input_ids.device) if input_ids is not None else (embeds.shape[:2],
                                                                                            embeds.device)
        for name in self.inputs:
            if kwargs.get(name) is None:
                kwargs[name] = torch.zeros(shape, dtype=torch.long, device=device)
        return args, kwargs
