"""Critics for PPO: a value head on the policy's hidden states, a second LoRA adapter, or a reward model.

Shapes: N sequences, R response length, H hidden size.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification

from lit_rlhf.config.algo import CRITIC_KINDS  # noqa: F401  (re-exported)
from lit_rlhf.config.validation import warn_once
from lit_rlhf.distributed.meta_loading import empty_model, initialise_unsaved
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.loading import (
    TORCH_LAYERS,
    from_pretrained,
    lacking_backbone_weights,
    load_report_held,
    resolve_dtype,
)
from lit_rlhf.models.lora_inputs import hold_lora_inputs_in_their_dtype
from lit_rlhf.models.lora_targets import lora_config
from lit_rlhf.models.peft_warnings import get_peft_model_checked
from lit_rlhf.models.policy import TRAINABLE_ADAPTER

CRITIC_ADAPTER = "critic"


class ValueHead(torch.nn.Module):
    """A scalar per position from the last hidden state; starts at 0 everywhere."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.summary = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.summary.weight)
        torch.nn.init.zeros_(self.summary.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # N,R,H -> N,R
        return self.summary(hidden.to(self.summary.weight.dtype)).squeeze(-1)


def add_critic_adapter(policy: torch.nn.Module, lora: dict[str, Any] | None) -> None:
    """A second LoRA adapter on the policy's base weights: the critic's own backbone, no second copy."""
    if lora is None or not hasattr(policy, "add_adapter"):
        raise ConfigError("algo.critic=adapter needs LoRA (model.lora set); use algo.critic=shared otherwise.")
    policy.add_adapter(CRITIC_ADAPTER, lora_config(policy.get_base_model(), task_type="CAUSAL_LM", **lora))
    hold_lora_inputs_in_their_dtype(policy)
    _activate_policy_adapter(policy)


def _activate_policy_adapter(policy: torch.nn.Module) -> None:
    """Makes the policy's adapter the active one, keeping the critic's trainable: peft's switch sets
    requires_grad=False on inactive adapters, and autograd drops gradients of leaves that no longer
    require grad at backward time, which would silently freeze the critic."""
    policy.base_model.set_adapter(TRAINABLE_ADAPTER)
    for name, param in policy.named_parameters():
        if f".{CRITIC_ADAPTER}." in name:
            param.requires_grad_(True)


@contextmanager
def critic_adapter_active(policy: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Runs the critic's adapter (and not the policy's) for the length of the block."""
    policy.base_model.set_adapter(CRITIC_ADAPTER)
    try:
        yield policy
    finally:
        _activate_policy_adapter(policy)


def load_reward_model_critic(name_or_path: str, dtype: str | None, lora: dict[str, Any] | None, empty: bool = False):
    """Backbone and score head of a sequence-classification reward model: (backbone, head).

    Its backbone is a separate set of weights (a reward model is not the policy), trained through
    LoRA when model.lora is set; its 1-output score head becomes the value head. empty: built with placeholders,
    each rank reading its shards after sharding (trainer=fsdp2; lit_rlhf/distributed/meta_loading.py).
    """
    key = "algo.critic_model_path"
    if empty:
        model = empty_model(AutoModelForSequenceClassification, name_or_path, key, resolve_dtype(dtype), num_labels=1)
        initialise_unsaved(model, model.score)
    else:
        with load_report_held():  # a causal LM's folder has no score head: from_pretrained starts it, as expected
            model, loading = from_pretrained(AutoModelForSequenceClassification.from_pretrained, name_or_path,
                                             "critic reward model", key=key, dtype=resolve_dtype(dtype), num_labels=1,
                                             output_loading_info=True, **TORCH_LAYERS)
        if line := lacking_backbone_weights(model, loading["missing_keys"], key, name_or_path):
            warn_once(line)
    backbone, head = model.base_model, model.score
    if lora is not None:
        backbone = get_peft_model_checked(backbone, lora_config(backbone, **lora))
        hold_lora_inputs_in_their_dtype(backbone)
    return backbone, head.float().requires_grad_(True)


def reward_model_values(backbone: torch.nn.Module, head: torch.nn.Module, inputs: dict[str, torch.Tensor],
                        response_length: int, detach_backbone: bool = False) -> torch.Tensor:
    """Values before each response token from a reward-model critic. -> (N,R)"""
    hidden = backbone(**inputs, use_cache=False).last_hidden_state[:, -(response_length + 1):-1]  # N,R,H
    if detach_backbone:
        hidden = hidden.detach()
    return head(hidden.to(head.weight.dtype)).squeeze(-1)  # N,R
