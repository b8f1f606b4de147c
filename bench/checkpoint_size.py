"""Checkpoint sizes of LoRA runs: the embedded default and a pythia-160m-shaped model (random weights).

    python bench/checkpoint_size.py        # prints a Markdown table; ~1 minute on 2 CPU cores

Builds the 160m model from pythia-160m's configuration (no download; bench/workload.py), trains one RL step with LoRA
and compares the Lightning checkpoint with the size of the model's own weights.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import lightning as L
import torch
from command_line import takes_no_options
from lightning.pytorch.callbacks import ModelCheckpoint
from workload import LORA, build_model

from lit_rlhf import PromptDataModule, RLOOModule
from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.rewards import VaderSentiment


def checkpoint_size(model_path: str, workdir: Path) -> tuple[int, int]:
    L.seed_everything(0)
    module = RLOOModule(model={"name_or_path": model_path, "lora": LORA}, reward=VaderSentiment(),
                        optimizer=functools.partial(torch.optim.AdamW, lr=1e-4), rloo_k=2, response_length=8)
    trainer = L.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_progress_bar=False,
                        limit_val_batches=0, enable_model_summary=False,
                        callbacks=[ModelCheckpoint(dirpath=workdir, filename="ckpt")])
    trainer.fit(module, PromptDataModule(tokenizer=model_path, batch_size=2))
    weights = sum(p.numel() * p.element_size() for n, p in module.named_parameters() if "lora_" not in n)
    return (workdir / "ckpt.ckpt").stat().st_size, weights


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, path in (("embedded default (tiny pythia)", TINY_PYTHIA),
                           ("pythia-160m shape", str(build_model("pythia-160m")))):
            size, weights = checkpoint_size(path, tmp / name.split()[0])
            rows.append((name, size, weights))
    print("| model | checkpoint (LoRA r=16, Adam state, RNG, counters) | base weights (fp32) |")
    print("|---|---|---|")
    for name, size, weights in rows:
        print(f"| {name} | {size / 2**20:.2f} MiB | {weights / 2**20:.1f} MiB |")


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
