"""The part of a model that text prompts go through. A multimodal checkpoint (Gemma 3's, Qwen2.5-VL's, LLaVA's) loads
as its ...ForConditionalGeneration, a vision tower and its projector beside the text decoder; text-only training
never reaches them, so they get no adapters (lora_targets.py) and, in a full fine-tune, are frozen: parameters
without a gradient would stop trainer=ddp on DDP's unused parameters."""

from __future__ import annotations

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
