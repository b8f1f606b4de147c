"""DPOModule: Direct Preference Optimization on preference pairs, the offline baseline the RL modules are compared
with. The reference is shared as in the RL modules: with LoRA, the policy with its adapters disabled.

    logits = beta * ((log pi(y_c|x) - log ref(y_c|x)) - (log pi(y_r|x) - log ref(y_r|x)))
    loss   = -log sigmoid(logits)

(TRL's DPOTrainer, loss_type "sigmoid"; log pi(y|x) sums the response tokens' logprobs). With cdpo_epsilon > 0,
conservative DPO (Mitchell 2023: each label flipped with probability epsilon), a form of its own:

    loss   = -(1 - cdpo_epsilon) * log sigmoid(logits) - cdpo_epsilon * log sigmoid(-logits)
 Metrics after TRL's:
rewards/chosen and rewards/rejected (beta * (log pi - log ref), means), rewards/accuracies (chosen above
rejected), rewards/margins, logps/chosen, logps/rejected; on held-out pairs with the eval/ prefix.

Shapes: B pairs, L sequence length; a batch holds the B chosen sequences, then the B rejected (2B,L).
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from lit_rlhf.algos.pair_module import PairModule
from lit_rlhf.config import model_config
from lit_rlhf.config.validation import check_number, check_optimizer, is_number
from lit_rlhf.errors import ConfigError
from lit_rlhf.models import load_model_tokenizer, load_policy
from lit_rlhf.models.export import export_model
from lit_rlhf.models.forwards import last_tokens_logprobs_and_entropy


def sequence_logprobs(model: torch.nn.Module, batch: dict[str, torch.Tensor], chunk_size: int | None = None,
                      logits_budget_mib: float | None = None) -> torch.Tensor:
    """Sum of the logprobs of each sequence's response tokens (response_mask), through the RL modules' logprob
    forward (chunked from the last hidden states with chunk_size; temperature 1). -> 2B"""
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}  # right-padded
    logprobs, _ = last_tokens_logprobs_and_entropy(model, inputs, batch["input_ids"][:, 1:],
                                                   batch["response_mask"][:, 1:], 1.0, chunk_size, logits_budget_mib,
                                                   with_entropy=False)  # 2B,L-1
    return logprobs.sum(-1)


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, reference_chosen: torch.Tensor,
             reference_rejected: torch.Tensor, beta: float, cdpo_epsilon: float = 0.0) -> torch.Tensor:
    """The mean over B pairs of the sigmoid DPO loss (conservative with cdpo_epsilon > 0); every argument: B
    sequence logprobs."""
    logits = beta * ((policy_chosen - reference_chosen) - (policy_rejected - reference_rejected))  # B
    return (-(1 - cdpo_epsilon) * F.logsigmoid(logits) - cdpo_epsilon * F.logsigmoid(-logits)).mean()


class DPOModule(PairModule):
    """model: the policy's spec (as the RL modules': name_or_path, lora, ...); optimizer: a partial of a torch
    optimizer (AdamW at lr 5e-6 by default, TRL's DPO default 1e-6 is for full fine-tuning of large models)."""

    def __init__(self, model: dict[str, Any], optimizer: Any = None, beta: float = 0.1, cdpo_epsilon: float = 0.0,
                 label_smoothing: Any = None, logits_chunk_size: int | None = 1024,
                 logits_budget_mib: float | None = 512.0):
        super().__init__()
        if label_smoothing not in (None, 0):  # TRL's name: its sigmoid loss ignores it, so it would mislead here
            raise ConfigError(f"algo.label_smoothing={label_smoothing!r}: TRL's sigmoid DPO loss ignores "
                              f"label_smoothing; the conservative-DPO form is algo.cdpo_epsilon here; drop "
                              f"label_smoothing (or set algo.cdpo_epsilon).")
        if not (is_number(beta) and math.isfinite(beta) and beta > 0):
            raise ConfigError(f"algo.beta={beta!r} must be a finite number > 0 (TRL's default 0.1).")
        if not (is_number(cdpo_epsilon) and 0 <= cdpo_epsilon < 0.5):
            raise ConfigError(f"algo.cdpo_epsilon={cdpo_epsilon!r} must be a number in [0, 0.5) (0: plain DPO).")
        check_number("logits_chunk_size", logits_chunk_size, minimum=1, integer=True, optional=True)
        check_number("logits_budget_mib", logits_budget_mib, minimum=0, optional=True)
        check_optimizer(optimizer)
        self.save_hyperparameters({"model": asdict(model_config(model)), "beta": beta, "cdpo_epsilon": cdpo_epsilon,
                                   "logits_chunk_size": logits_chunk_size, "logits_budget_mib": logits_budget_mib})
        self.optimizer_factory = optimizer or functools.partial(torch.optim.AdamW, lr=5e-6)
        self.policy = self.reference = self.tokenizer = None

    def configure_model(self) -> None:
        if self.policy is not None:
            return
        spec = dict(self.hparams.model)
        self.tokenizer = load_model_tokenizer(spec)
        spec.pop("tokenizer_name_or_path", None)  # the policy's loader takes the rest
        self.policy, self.reference = load_policy(tokenizer=self.tokenizer, **spec)
        self.frozen_reference = self.reference.frozen_copy  # registered: it follows the device (full fine-tuning)

    def step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        hp = self.hparams
        chunking = hp.logits_chunk_size, hp.logits_budget_mib
        policy_chosen, policy_rejected = sequence_logprobs(self.policy, batch, *chunking).chunk(2)  # B, B
        with torch.no_grad(), self.reference.active() as reference:
            reference_chosen, reference_rejected = sequence_logprobs(reference, batch, *chunking).chunk(2)  # B, B
        loss = dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, hp.beta,
                        hp.cdpo_epsilon)
        chosen = hp.beta * (policy_chosen - reference_chosen).detach()  # B
        rejected = hp.beta * (policy_rejected - reference_rejected).detach()  # B
        prefix = "" if stage == "train" else "eval/"
        metrics = {"loss": loss.detach(), "rewards/chosen": chosen.mean(), "rewards/rejected": rejected.mean(),
                   "rewards/accuracies": (chosen > rejected).float().mean(),
                   "rewards/margins": (chosen - rejected).mean(), "logps/chosen": policy_chosen.detach().mean(),
                   "logps/rejected": policy_rejected.detach().mean()}
        self.log_metrics({prefix + k: v for k, v in metrics.items()}, len(chosen), stage)  # TRL's names
        return loss

    def configure_optimizers(self):
        return self.optimizer_factory([p for p in self.policy.parameters() if p.requires_grad])

    def save_policy(self, directory: str | Path) -> Path:
        """The trained policy as a Hugging Face model folder (LoRA merged into a copy), with its tokenizer:
        `evaluate.py policy_path=<folder>` compares it with the model it started from."""
        return export_model(self.policy, self.tokenizer, directory, on_a_copy=True, key="save_dir", into_existing=True)
