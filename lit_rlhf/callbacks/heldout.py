"""Sampling on the held-out prompts, shared by the callbacks that show what the policy writes."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch


def heldout_batch(trainer: L.Trainer, module, num_prompts: int | None = None) -> dict[str, torch.Tensor] | None:
    """The first held-out prompts of the datamodule, on the module's device (None without one)."""
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is None or not hasattr(datamodule, "val_dataloader"):
        return None
    batch = next(iter(datamodule.val_dataloader()))
    return {k: v[:num_prompts].to(module.device) for k, v in batch.items()}


def sample_heldout(module, batch: dict[str, torch.Tensor], seed: int, greedy: bool = False) -> dict[str, Any]:
    """One completion per prompt under a fixed seed, scored, without touching the training RNG.

    Sampling uses the training settings (pure sampling at the training temperature); greedy=True
    takes the argmax instead, for a low-variance view of what the policy prefers.
    """
    devices = [module.device] if module.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        config = module.generation_config
        if greedy:
            module.generation_config = config.__class__(**{**config.to_dict(), "do_sample": False})
        try:
            rollout = module.rollout(batch, samples_per_prompt=1, for_training=False)
        finally:
            module.generation_config = config
    kl, _ = module.kl_and_non_score_reward(rollout)
    per_sequence_kl = kl.sum(1)  # N
    return {"prompts": rollout.prompts, "completions": rollout.completions,
            "scores": rollout.raw_scores.tolist(), "kl": per_sequence_kl.tolist(),
            "mean_score": rollout.raw_scores.mean().item(), "mean_kl": per_sequence_kl.mean().item()}
