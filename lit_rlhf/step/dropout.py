"""Whether a model's train-mode forwards are random (dropout), which decides if the rollout's forward can
also be the update's (see RLHFModule.single_update)."""

from __future__ import annotations

import torch

from lit_rlhf.models.probes import probe_ids


def is_placeholder(param: torch.Tensor) -> bool:
    """A stride-0 view of one element: what sharded loading builds an empty model with."""
    return param.dim() > 0 and param.numel() > 1 and not any(param.stride())


@torch.no_grad()
def has_active_dropout(model: torch.nn.Module) -> bool:
    """Whether train-mode forwards are random: a Dropout module with p > 0 (e.g. lora_dropout, which acts
    only once LoRA's B is non-zero), or, judged by what the model does, two train-mode forwards of the same
    tokens that disagree (dropout applied functionally from the config, e.g. OPT's config.dropout, which no
    module shows). The global random state is left untouched. A model that cannot run the probe here
    (ZeRO-3 partitioned, on the meta device, or holding trainer=fsdp2's loading placeholders: zeros, on which
    dropout shows nothing, and which a mixture of experts' grouped matmul refuses) counts as random."""
    if any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules()):
        return True
    if any(hasattr(p, "ds_id") or p.is_meta or is_placeholder(p) for p in model.parameters()):
        return True
    ids = probe_ids(model, tuple(range(1, 17)))  # 1,16
    device = ids.device
    was_training = model.training
    model.train()
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            first, second = model(input_ids=ids).logits, model(input_ids=ids).logits
    finally:
        model.train(was_training)
    return not torch.equal(first, second)
