"""SequenceClassifierReward: a Hugging Face sequence-classification reward model (e.g. one train_reward_model.py
trained) scoring prompt + completion."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch

from lit_rlhf.config.validation import check_flag, check_setting_number
from lit_rlhf.distributed.meta_loading import empty_model, unsaved_keys
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.loading import TORCH_LAYERS, from_pretrained, load_report_held, own_code_refused, resolve_dtype
from lit_rlhf.models.tokenizer import known_pad_token, load_checked_tokenizer, tokenizer_source


class SequenceClassifierReward:
    """Logit `label_index` of an AutoModelForSequenceClassification on prompt + completion.

    A completion that ended with the policy's stop token (the rollout's `stopped` column) is scored with the reward
    tokenizer's EOS at its end, as the model saw its training pairs (TRL's RewardTrainer ends both responses with
    EOS, and TRL's RL trainers score the stop token with the response). Weights load on first call, so the config
    can be instantiated without them.
    """

    def __init__(self, name_or_path: str, dtype: str = "float32", label_index: int = 0,
                 batch_size: int = 16, max_length: int = 1024, device: str | None = None,
                 tokenizer_name_or_path: str | None = None, normalize: bool = False):
        check_flag("reward.normalize", normalize)
        resolve_dtype(dtype, "reward.dtype")
        for key, value in (("batch_size", batch_size), ("max_length", max_length)):  # 0: a step of 0, no tokens
            check_setting_number(f"reward.{key}", value, minimum=1, integer=True)
        check_setting_number("reward.label_index", label_index, integer=True)  # checked against the head in load()
        self.name_or_path, self.dtype, self.label_index = name_or_path, dtype, label_index
        self.normalize, self.stats = normalize, None
        self.tokenizer_name_or_path, self.tokenizer_key = tokenizer_source(
            {"name_or_path": name_or_path, "tokenizer_name_or_path": tokenizer_name_or_path}, "reward")
        self.batch_size, self.max_length, self.device = batch_size, max_length, device
        self.model = self.tokenizer = None

    def load(self, empty: bool = False) -> None:
        """Loads weights and tokenizer (once): the RLHF module calls it when it loads the policy. empty: the model
        with placeholder weights that each rank reads by shards once sharded (trainer=fsdp2, in the module)."""
        if self.model is not None:
            return
        from transformers import AutoModelForSequenceClassification

        with own_code_refused(self.tokenizer_key, self.tokenizer_name_or_path):
            self.tokenizer = load_checked_tokenizer(self.tokenizer_name_or_path, key=self.tokenizer_key)
        if self.tokenizer.pad_token is None or self.tokenizer.pad_token_id == self.tokenizer.eos_token_id:
            # the head reads the last token that is not padding: padding other than EOS lets it read a final EOS
            # (the model's embeddings stay as they are, so no token is added; EOS pads where the vocabulary has none)
            self.tokenizer.pad_token = known_pad_token(self.tokenizer) or self.tokenizer.eos_token
        if empty:
            self.model = empty_model(AutoModelForSequenceClassification, self.name_or_path, "reward.name_or_path",
                                     resolve_dtype(self.dtype))
            missing = unsaved_keys(self.model)
        else:
            with own_code_refused("reward.name_or_path", self.name_or_path), load_report_held():  # said below
                self.model, loading = from_pretrained(
                    AutoModelForSequenceClassification.from_pretrained, self.name_or_path, "reward model",
                    key="reward.name_or_path", dtype=resolve_dtype(self.dtype), output_loading_info=True,
                    **TORCH_LAYERS)
            missing = loading.get("missing_keys") or []
        self.model.eval().requires_grad_(False)
        check_head_loaded(self.name_or_path, sorted(missing))
        labels = self.model.config.num_labels
        if not -labels <= self.label_index < labels:
            raise ConfigError(f"reward.label_index={self.label_index} is not a logit of {self.name_or_path!r}, whose "
                              f"head has {labels} (num_labels): set reward.label_index from 0 to {labels - 1}.")
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        if self.device and not empty:
            self.model.to(self.device)
        if self.normalize:
            self.stats = saved_reward_stats(self.name_or_path)

    @torch.no_grad()
    def __call__(self, prompts: Sequence[str], completions: Sequence[str],
                 stopped: Sequence[bool] | None = None) -> torch.Tensor:
        if self.model is None:
            self.load()
        eos = self.tokenizer.eos_token or ""
        ends = [eos if stop else "" for stop in stopped] if stopped is not None else [""] * len(completions)
        texts = [p + c + end for p, c, end in zip(prompts, completions, ends, strict=True)]
        self.model.eval()  # a model registered in a module (trainer=fsdp2) follows the module's train()
        scores = []
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(texts[start : start + self.batch_size], return_tensors="pt", padding=True,
                                 truncation=True, max_length=self.max_length).to(self.model.device)
            scores.append(self.model(**enc).logits[:, self.label_index].float().cpu())
        scores = torch.cat(scores)
        if self.stats is not None:  # normalize=True: the held-out mean and std saved beside the weights
            scores = (scores - self.stats["mean"]) / max(self.stats["std"], 1e-8)
        return scores


def check_head_loaded(name_or_path: str, missing_keys: list[str]) -> None:
    """A folder without the scalar head (e.g. a causal LM's) would score with a randomly initialised one."""
    if missing_keys:
        raise ConfigError(f"reward.name_or_path={str(name_or_path)!r} has no weights for {missing_keys[0]!r} (of "
                          f"{len(missing_keys)} missing), so its reward head would be random; give a sequence-"
                          f"classification model folder, e.g. one written by train_reward_model.py.")


def saved_reward_stats(name_or_path: str) -> dict[str, float]:
    """reward_stats.json of a reward model folder (RewardModelModule.save_reward_model writes it)."""
    path = Path(str(name_or_path)) / "reward_stats.json"
    try:
        stats = json.loads(path.read_text())
        mean, std = float(stats["mean"]), float(stats["std"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"reward.normalize=true reads the reward's mean and std from {path}, which is missing or "
                          f"not {{\"mean\": ..., \"std\": ...}} ({type(err).__name__}); set reward.normalize=false "
                          f"or give a folder written by a reward-model run.") from err
    if not (math.isfinite(mean) and math.isfinite(std) and std > 0):
        raise ConfigError(f"{path}: mean={mean} and std={std} must be finite with std > 0; set reward.normalize=false.")
    return {"mean": mean, "std": std}
