"""TRL's sync_ref_model (TR-DPO, Gorbatovski et al. 2024): the reference moves toward the policy during training, in
train.py's RL algorithms and in DPO.

After every `ref_model_sync_steps` optimizer steps, each parameter of the frozen reference copy becomes
alpha x the policy's + (1 - alpha) x its own (`ref_model_mixup_alpha`; 1 copies the policy), computed as TRL's
SyncRefModelCallback computes it. The KL term then holds the policy near a recent policy rather than the starting
one. With LoRA (which TRL refuses) the reference becomes an adapter of its own beside the trained one, equal to the
base model at the start, and alpha must be 1: the trained adapter is copied into it (a reference reset); a mix of two
adapters' products B A is no adapter of the same rank.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from lit_rlhf.config.validation import SYNC_REF_MODEL_UNDER_FSDP2
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.policy import REFERENCE_ADAPTER, TRAINABLE_ADAPTER, Reference

LORA_MIX = ("algo.sync_ref_model=true with LoRA and algo.ref_model_mixup_alpha={alpha}: a LoRA reference can only be "
            "reset to the policy (a mix of two adapters is no adapter of their rank); set "
            "algo.ref_model_mixup_alpha=1, or model.lora=null for TRL's mix of whole weights.")


class ReferenceSync:
    """Moves a module's reference (its frozen copy, or LoRA's reference adapter) toward its policy after the optimizer
    steps that are multiples of `every`: at the end of the RL step that completes one (config validation makes `every`
    a multiple of an RL step's optimizer steps, so each update falls where TRL's would), or, in DPO, right after it."""

    def __init__(self, enabled: bool, alpha: float, every: int):
        self.enabled, self.alpha, self.every = enabled, alpha, every

    @classmethod
    def of(cls, hp: Any, model: dict[str, Any]) -> ReferenceSync:
        """From an algorithm's settings and its model's (refusing, before anything loads, a mix of LoRA's reference:
        the policy with its adapters off can only be reset)."""
        sync = cls(hp.sync_ref_model, hp.ref_model_mixup_alpha, hp.ref_model_sync_steps)
        if sync.enabled and model.get("lora") and not model.get("reference_name_or_path") and sync.alpha != 1:
            raise ConfigError(LORA_MIX.format(alpha=sync.alpha))
        return sync

    def own_reference(self, policy: torch.nn.Module, reference: Reference) -> tuple[torch.nn.Module, Reference]:
        """The loaded policy and its reference, with LoRA's "adapters off" replaced by a reference adapter that can
        be reset (a copy of the trained adapter as loaded, whose B is 0 on a fresh run: the base model)."""
        if not self.enabled or reference.frozen_copy is not None:
            return policy, reference
        if reference.kind == "adapters_disabled":
            # its own copy of the config: peft marks an adapter's config when it switches to it for inference
            policy.add_adapter(REFERENCE_ADAPTER, copy.deepcopy(policy.peft_config[TRAINABLE_ADAPTER]))
            reset_reference_adapter(policy)
            policy.set_adapter(TRAINABLE_ADAPTER)  # re-enables grads of the trained adapter only
        return policy, Reference(policy)

    def check(self, module: Any, sharded: bool = False) -> None:
        """At fit start, with the models loaded: a reference of the policy's parameters, not sharded."""
        if not self.enabled:
            return
        if sharded:
            raise ConfigError(SYNC_REF_MODEL_UNDER_FSDP2)
        if module.reference.frozen_copy is None:
            return
        policy, reference = list(module.policy.parameters()), list(module.reference.frozen_copy.parameters())
        if [p.shape for p in policy] != [p.shape for p in reference]:
            raise ConfigError("algo.sync_ref_model=true mixes the policy into the reference parameter by parameter, "
                              "and model.reference_name_or_path has other parameters than the policy; use a reference "
                              "of the policy's architecture (or none: a copy of the policy).")

    @torch.no_grad()
    def after_step(self, module: Any, optimizer_steps: int) -> bool:
        """After an RL step that brought the optimizer steps to `optimizer_steps`: moves the reference when they
        reach a multiple of `every`. -> whether it moved."""
        if not self.enabled or optimizer_steps == 0 or optimizer_steps % self.every:
            return False
        if module.reference.frozen_copy is None:
            reset_reference_adapter(module.policy)
        else:
            mix(module.policy, module.reference.frozen_copy, self.alpha)
        return True


@torch.no_grad()
def mix(policy: torch.nn.Module, reference: torch.nn.Module, alpha: float) -> None:
    """reference <- alpha x policy + (1 - alpha) x reference, parameter by parameter, in place (TRL's formula)."""
    for target, source in zip(reference.parameters(), policy.parameters(), strict=True):
        target.mul_(1.0 - alpha).add_(source, alpha=alpha)


@torch.no_grad()
def reset_reference_adapter(policy: torch.nn.Module) -> None:
    """The reference adapter's tensors <- the trained adapter's (LoRA's A and B, DoRA's magnitudes): the policy."""
    params = dict(policy.named_parameters())
    for name, param in params.items():
        if f".{REFERENCE_ADAPTER}." in name:
            param.copy_(params[name.replace(f".{REFERENCE_ADAPTER}.", f".{TRAINABLE_ADAPTER}.")])
