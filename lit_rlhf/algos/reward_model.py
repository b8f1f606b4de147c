"""RewardModelModule: a causal LM backbone with a scalar head trained on preference pairs (Bradley-Terry).

    loss = -log sigmoid(r_chosen - r_rejected - margin) + center_rewards_coefficient * mean((r_chosen + r_rejected)^2)

as TRL's RewardTrainer (the margin column and the reward-centering term are optional). The backbone is Hugging
Face's AutoModelForSequenceClassification with one label (its score head reads the last non-pad token), trained
with LoRA (peft, the head trained in full) or in full. `save_reward_model(dir)` writes a folder that
`reward=reward_model reward.name_or_path=dir` loads as it is: the merged weights, the tokenizer, and
reward_stats.json with the mean and std of the rewards it gives the held-out pairs' responses, for normalization.
Under trainer=fsdp2 the classifier is sharded per transformer block and gathered whole for the save (pair_sharding.py).

Shapes: B pairs, L sequence length; a batch holds the B chosen sequences, then the B rejected (2B,L).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AutoModelForSequenceClassification

from lit_rlhf.algos.pair_module import PairModule
from lit_rlhf.algos.pair_sharding import fsdp2_strategy, loads_sharded, model_to_save, shard_policy_models
from lit_rlhf.config import model_config
from lit_rlhf.config.validation import check_flag, check_optimizer, is_number, warn_once
from lit_rlhf.distributed.meta_loading import empty_model, initialise_unsaved
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.export import export_model
from lit_rlhf.models.loading import (
    TORCH_LAYERS,
    attention_checked,
    from_pretrained,
    lacking_backbone_weights,
    load_report_held,
    resolve_dtype,
)
from lit_rlhf.models.policy import fit_embeddings, with_lora
from lit_rlhf.models.tokenizer import ensure_pad_token, load_checked_tokenizer, tokenizer_source

REWARD_STATS_FILE = "reward_stats.json"


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor, margin: torch.Tensor | None = None,
                       center_rewards_coefficient: float | None = None) -> torch.Tensor:
    """-log sigmoid(r_c - r_r - margin), averaged over the B pairs, plus the centering term. chosen, rejected: B."""
    difference = chosen - rejected - (margin if margin is not None else 0.0)  # B
    loss = -F.logsigmoid(difference).mean()
    if center_rewards_coefficient:
        loss = loss + center_rewards_coefficient * ((chosen + rejected) ** 2).mean()
    return loss


def pair_metrics(chosen: torch.Tensor, rejected: torch.Tensor) -> dict[str, torch.Tensor]:
    """accuracy (r_c > r_r), margin (mean r_c - r_r), reward mean and std over both responses of the B pairs."""
    both = torch.cat([chosen, rejected])  # 2B
    return {"accuracy": (chosen > rejected).float().mean(), "margin": (chosen - rejected).mean(),
            "reward_mean": both.mean(), "reward_std": both.std(unbiased=False)}


class RewardModelModule(PairModule):
    """model: {name_or_path, tokenizer_name_or_path, dtype, lora: {r, lora_alpha, ...} or None for full
    fine-tuning}; optimizer: a partial of a torch optimizer (AdamW at lr 1e-5 by default)."""

    trains_on = "preference pairs"  # the batches it takes (a data module's `batches`), checked at a fit's start

    shards = True  # trainer=fsdp2: the classifier sharded per transformer block (pair_sharding.py)
    saved_backbone: torch.nn.Module | None = None  # set by prepare_save: the classifier save_reward_model writes

    def __init__(self, model: dict[str, Any], optimizer: Any = None, center_rewards_coefficient: float | None = None,
                 use_margin: bool = True):
        super().__init__()
        model = asdict(model_config(model))  # the RL modules' checks: LoRA settings, unknown keys, dtype
        check_optimizer(optimizer)
        check_flag("algo.use_margin", use_margin)
        if center_rewards_coefficient is not None and not (
                is_number(center_rewards_coefficient) and math.isfinite(center_rewards_coefficient)
                and center_rewards_coefficient >= 0):
            raise ConfigError(f"algo.center_rewards_coefficient={center_rewards_coefficient!r} must be a finite "
                              f"number >= 0 (null: off; TRL suggests 0.01).")
        self.save_hyperparameters(ignore=["optimizer"])
        self.optimizer_factory = optimizer or functools.partial(torch.optim.AdamW, lr=1e-5)
        self.backbone = self.tokenizer = None
        self.eval_rewards: list[torch.Tensor] = []

    def configure_model(self) -> None:
        """The classifier loaded, then under trainer=fsdp2 sharded (each rank reading its shards under sharded
        loading)."""
        if self.backbone is not None:
            return
        spec = self.hparams.model
        self.tokenizer = load_checked_tokenizer(*tokenizer_source(spec))
        ensure_pad_token(self.tokenizer)
        self.backbone = reward_model_to_train(spec, self.tokenizer, empty=loads_sharded(self))
        if fsdp2_strategy(self) is not None:
            shard_policy_models(self, [self.backbone])

    def rewards(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The scalar rewards of the chosen and of the rejected responses. -> (B, B)"""
        scores = self.backbone(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, 0]
        chosen, rejected = scores.float().chunk(2)  # B, B
        return chosen, rejected

    def step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        chosen, rejected = self.rewards(batch)
        margin = batch.get("margin") if self.hparams.use_margin else None
        loss = bradley_terry_loss(chosen, rejected, margin, self.hparams.center_rewards_coefficient)
        metrics = {f"{stage}/{name}": value for name, value in pair_metrics(chosen.detach(), rejected.detach()).items()}
        self.log_metrics({f"{stage}/loss": loss.detach(), **metrics}, len(chosen), stage)
        if stage == "val":
            self.eval_rewards.append(torch.cat([chosen, rejected]).detach())
        return loss

    def on_validation_epoch_start(self) -> None:
        self.eval_rewards = []

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        if self.eval_rewards and self.trainer.world_size > 1:  # every rank's share (as many on each: the sampler's)
            self.eval_rewards = [self.all_gather(torch.cat(self.eval_rewards)).flatten()]
        self.eval_rewards = [rewards.cpu() for rewards in self.eval_rewards]

    def configure_optimizers(self):
        return self.optimizer_factory([p for p in self.parameters() if p.requires_grad])

    def reward_stats(self) -> dict[str, float] | None:
        """Mean and std of the rewards of the last validation's responses (chosen and rejected)."""
        if not self.eval_rewards:
            return None
        rewards = torch.cat(self.eval_rewards)
        return {"mean": float(rewards.mean()), "std": float(rewards.std(unbiased=False)), "count": len(rewards)}

    def prepare_save(self) -> None:
        """Under trainer=fsdp2 the classifier's shards gathered whole on rank zero (every rank takes part)."""
        saved = model_to_save(self, self.backbone,
                              lambda empty: reward_model_to_train(self.hparams.model, self.tokenizer, empty))
        # a plain attribute, not a submodule: it is no part of the module's state or checkpoints
        object.__setattr__(self, "saved_backbone", saved)

    def save_reward_model(self, directory: str | Path) -> Path:
        """A folder `reward=reward_model` loads as it is: merged weights (safetensors), tokenizer, reward_stats.json."""
        stats = self.reward_stats()
        extra = None if stats is None else {REWARD_STATS_FILE: json.dumps(stats, indent=2) + "\n"}
        backbone = self.saved_backbone if self.saved_backbone is not None else self.backbone
        # the gathered copy is this fit's own: LoRA merges into it in place
        return export_model(backbone, self.tokenizer, directory, on_a_copy=backbone is self.backbone,
                            extra_files=extra, key="save_dir", into_existing=True)


def reward_model_to_train(spec: dict[str, Any], tokenizer, empty: bool = False) -> torch.nn.Module:
    """spec's model as a classifier of one label (AutoModelForSequenceClassification: a causal LM's folder gets a new
    score head), with room for the tokenizer's pad token and LoRA adapters where spec has lora (peft trains the score
    head in full beside them). empty: built with placeholders, each rank reading its shards once sharded."""
    key, name_or_path, dtype = "model.name_or_path", spec["name_or_path"], resolve_dtype(spec.get("dtype", "float32"))
    with attention_checked(spec.get("attn_implementation"), key, name_or_path) as attention:
        if empty:
            backbone = empty_model(AutoModelForSequenceClassification, name_or_path, key, dtype, num_labels=1,
                                   **attention)
            initialise_unsaved(backbone, backbone.score)
        else:
            with load_report_held():  # a causal LM's folder has no score head: from_pretrained starts it, as expected
                backbone, loading = from_pretrained(AutoModelForSequenceClassification.from_pretrained, name_or_path,
                                                    "reward model backbone", key=key, num_labels=1, dtype=dtype,
                                                    output_loading_info=True, **TORCH_LAYERS, **attention)
            if line := lacking_backbone_weights(backbone, loading["missing_keys"], key, name_or_path):
                warn_once(line)
    fit_embeddings(backbone, tokenizer, key)
    backbone.config.pad_token_id = tokenizer.pad_token_id
    if spec.get("lora") is not None:
        backbone = with_lora(backbone, spec["lora"], "SEQ_CLS", name_or_path)
    return backbone
