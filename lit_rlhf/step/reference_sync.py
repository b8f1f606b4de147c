"""TRL's sync_ref_model (TR-DPO, Gorbatovski et al. 2024): the reference moves toward the policy during training.

After every `ref_model_sync_steps` optimizer steps, each parameter of the frozen reference copy becomes
alpha x the policy's + (1 - alpha) x its own (`ref_model_mixup_alpha`; 1 copies the policy), computed as TRL's
SyncRefModelCallback computes it. The KL term then holds the policy near a recent policy rather than the starting
one. It needs a reference of its own: with LoRA the reference is the policy with its adapters off, which cannot move
without the policy (TRL refuses PEFT models too).
"""

from __future__ import annotations

from typing import Any

import torch

from lit_rlhf.errors import ConfigError

LORA_REFERENCE = ("algo.sync_ref_model=true moves the reference toward the policy, and with LoRA the reference is the "
                  "policy with its adapters off (it cannot move apart from the policy; TRL refuses it too); set "
                  "model.lora=null (full fine-tuning, a frozen copy as the reference) or algo.sync_ref_model=false.")
UNDER_FSDP2 = ("algo.sync_ref_model=true is not supported with trainer=fsdp2; use trainer=ddp or set "
               "algo.sync_ref_model=false.")


class ReferenceSync:
    """Moves a module's frozen reference toward its policy at the end of the RL steps that complete a multiple of
    `every` optimizer steps (config validation makes `every` a multiple of an RL step's optimizer steps, so each
    update falls where TRL's would)."""

    def __init__(self, enabled: bool, alpha: float, every: int):
        self.enabled, self.alpha, self.every = enabled, alpha, every

    @classmethod
    def of(cls, hp: Any) -> ReferenceSync:
        return cls(hp.sync_ref_model, hp.ref_model_mixup_alpha, hp.ref_model_sync_steps)

    def check(self, module: Any) -> None:
        """At fit start, with the models loaded: a frozen copy of the policy's parameters, not sharded."""
        if not self.enabled:
            return
        if module.reference.frozen_copy is None:
            raise ConfigError(LORA_REFERENCE)
        if module.sharding.fsdp2:
            raise ConfigError(UNDER_FSDP2)
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
        mix(module.policy, module.reference.frozen_copy, self.alpha)
        return True


@torch.no_grad()
def mix(policy: torch.nn.Module, reference: torch.nn.Module, alpha: float) -> None:
    """reference <- alpha x policy + (1 - alpha) x reference, parameter by parameter, in place (TRL's formula)."""
    for target, source in zip(reference.parameters(), policy.parameters(), strict=True):
        target.mul_(1.0 - alpha).add_(source, alpha=alpha)
