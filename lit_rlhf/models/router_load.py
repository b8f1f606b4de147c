"""The load-balancing loss of a mixture-of-experts policy (TRL's router_aux_loss_coef term): the Switch Transformer's
auxiliary loss over the routers of every layer, computed as the model family's own forward computes its `aux_loss`
(transformers' load_balancing_loss_func, which every MoE family shares), over the real tokens of the training
forwards: the prompt and response tokens, not the padding of a padded batch or the filler at the end of a packed row.

TRL adds it to the training loss of GRPO, RLOO, DPO, KTO and SFT when the model's config has output_router_logits
(set or not: a MoE model's config carries the key, a dense one's does not) and the coefficient is not 0. It adds the
model's own aux_loss, which the families whose routers balance without an auxiliary loss (DeepSeek-V3, GLM-4.5,
Llama 4, ...: their configs carry the key too) never compute: for them there is nothing to add.

Shapes: rows, L positions.
"""

from __future__ import annotations

import sys

import torch
from lightning.pytorch.utilities import rank_zero_info

from lit_rlhf.errors import ConfigError


def routes_tokens_to_experts(model: torch.nn.Module) -> bool:
    """Whether the model is a mixture of experts whose forward can return its routers' logits (TRL's test)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return getattr(config, "output_router_logits", None) is not None


def computes_its_aux_loss(model: torch.nn.Module) -> bool:
    """Whether the model family's own forward computes its routers' load-balancing loss: its modeling module has
    transformers' load_balancing_loss_func (Mixtral, the Qwen MoEs, OLMoE, gpt-oss, ... do; DeepSeek-V3, GLM-4.5,
    Llama 4, ... route without an auxiliary loss and do not)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # under peft's wrapper
    return hasattr(sys.modules.get(type(base).__module__), "load_balancing_loss_func")


def experts_of(model: torch.nn.Module) -> tuple[int, int]:
    """(experts per layer, experts each token is routed to), as the model's own forward reads them."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # under peft's wrapper
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    experts = getattr(base, "num_experts", None) or getattr(config, "num_experts", None) or \
        getattr(config, "num_local_experts", None)
    per_token = getattr(base, "num_experts_per_tok", None) or getattr(config, "num_experts_per_tok", None)
    if not experts or not per_token:
        raise ConfigError(f"algo.router_aux_loss_coef: the {config.model_type} model's config has "
                          f"output_router_logits but names no number of experts (num_experts or num_local_experts) "
                          f"or num_experts_per_tok; set algo.router_aux_loss_coef=0.")
    return int(experts), int(per_token)


class RouterLoad:
    """Collects the load-balancing loss of the training forwards of one micro-batch (`add` after each forward that
    ran with `forward_kwargs`); `take` gives their mean, as TRL averages the forward chunks of a micro-batch."""

    forward_kwargs = {"output_router_logits": True}

    def __init__(self, model: torch.nn.Module, coefficient: float = 0.001):
        self.experts, self.per_token = experts_of(model)
        self.coefficient, self.model_type = coefficient, model.config.model_type
        self.losses: list[torch.Tensor] = []

    def add(self, output, token_mask: torch.Tensor) -> None:
        """The loss of one forward's routers (its output's router_logits: one (rows*L, experts) tensor a layer) over
        its real tokens (token_mask: rows,L)."""
        from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

        router_logits = getattr(output, "router_logits", None)
        if not router_logits:
            raise ConfigError(f"algo.router_aux_loss_coef={self.coefficient}: the {self.model_type} model returned no "
                              f"router logits with output_router_logits=True; set algo.router_aux_loss_coef=0.")
        router_logits = tuple(router_logits)
        self.losses.append(load_balancing_loss_func(router_logits, self.experts, self.per_token, token_mask))

    def take(self) -> torch.Tensor | None:
        """The mean loss of the forwards since the last take (None: there were none), and forget them."""
        losses, self.losses = self.losses, []
        return torch.stack(losses).mean() if losses else None

    def clear(self) -> None:
        self.losses = []


def router_load_of(model: torch.nn.Module, coefficient: float) -> RouterLoad | None:
    """The policy's collector where its load-balancing loss is trained (a MoE model whose forward computes one, and a
    coefficient above 0)."""
    if not coefficient or not routes_tokens_to_experts(model):
        return None
    if not computes_its_aux_loss(model):
        rank_zero_info(f"algo.router_aux_loss_coef={coefficient}: the {model.config.model_type} model's routers "
                       f"balance without an auxiliary loss (its forward computes none), so none is added.")
        return None
    return RouterLoad(model, coefficient)
