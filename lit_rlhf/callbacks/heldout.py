"""The held-out prompts, for the callbacks that show what the policy writes (module.sample_heldout)."""

from __future__ import annotations

import lightning as L
import torch

from lit_rlhf.data.datamodule import batch_to


def heldout_batch(trainer: L.Trainer, module, num_prompts: int | None = None) -> dict[str, torch.Tensor] | None:
    """The first held-out prompts of the datamodule, on the module's device (None without one, or none held out:
    data.num_eval_prompts=0)."""
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is None or not hasattr(datamodule, "val_dataloader"):
        return None
    batch = next(iter(datamodule.val_dataloader()), None)
    return None if batch is None else batch_to(batch, module.device, num_prompts)
