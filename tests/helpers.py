"""Callbacks that tests attach to train.py runs through Hydra overrides."""

from pathlib import Path

import lightning as L
import torch


class DumpTrainable(L.Callback):
    """Writes, per rank, the trained tensors, the episode count and the prompts each step saw."""

    def __init__(self, path: str):
        self.path, self.prompts = Path(path), []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.prompts.append(module.tokenizer.batch_decode(batch["input_ids"], skip_special_tokens=True))

    def on_fit_end(self, trainer, module):
        self.path.mkdir(parents=True, exist_ok=True)
        trained = {k: v.detach().cpu() for k, v in module.state_dict().items() if k in module.trained_state_keys()}
        torch.save({"trained": trained, "episode": module.episode, "prompts": self.prompts,
                    "world_size": trainer.world_size}, self.path / f"rank{trainer.global_rank}.pt")


class ShorterWins:
    """A user-defined pairwise judge (reads only the texts): the shorter completion wins."""

    def __call__(self, prompts, policy_completions, reference_completions, policy_scores, reference_scores):
        return torch.tensor([1.0 if len(p) < len(r) else 0.0 if len(p) > len(r) else 0.5
                             for p, r in zip(policy_completions, reference_completions, strict=True)])
