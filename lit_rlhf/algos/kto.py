"""KTOModule: Kahneman-Tversky Optimization (Ethayarajh et al. 2024) on unpaired completions, each labelled desirable
or undesirable, as TRL's KTOTrainer computes it. The reference is shared as in DPO: with LoRA, the policy with its
adapters disabled. For a row with log-ratio r = log pi(y|x) - log ref(y|x) (summed over the completion's tokens):

    desirable:    loss = desirable_weight   x (1 - sigmoid(beta x (r - z)))
    undesirable:  loss = undesirable_weight x (1 - sigmoid(beta x (z - r)))

averaged over the batch's rows, where z, the reference point, estimates the KL of the policy to the reference: the
mean log-ratio of the batch's KL rows (each prompt with another row's completion, data.labeled_completions), averaged
over the ranks, clamped at 0, with no gradient. loss_type=apo_zero_unpaired (TRL's) drops z: 1 - sigmoid(beta x r)
for a desirable row, sigmoid(beta x r) for an undesirable one.

Metrics after TRL's: loss, kl (z), rewards/chosen and rewards/rejected (beta x r over the desirable and the undesirable
rows), rewards/margins (their difference), logps/chosen, logps/rejected (the summed logprobs), logits/chosen,
logits/rejected (the mean logit over the vocabulary at their tokens), entropy, num_tokens; on held-out rows with the
eval/ prefix, each a mean over every held-out row (or token).

Shapes: B rows, L sequence length; the KL rows (B,L').
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from typing import Any

import torch
import torch.nn.functional as F

from lit_rlhf.algos.dpo import token_logprobs
from lit_rlhf.algos.pair_module import PolicyPairModule
from lit_rlhf.config import model_config
from lit_rlhf.config.idle import REFERENCE_SYNC_DEFAULTS, idle_reference_sync
from lit_rlhf.config.validation import (
    check_choice,
    check_flag,
    check_kto_batch_size,
    check_number,
    check_optimizer,
    check_reference_sync_numbers,
    warn_once,
)
from lit_rlhf.distributed.sharding import is_sharded
from lit_rlhf.step.reference_sync import ReferenceSync

LOSS_TYPES = ("kto", "apo_zero_unpaired")  # TRL's KTO loss types


def kto_losses(logratios: torch.Tensor, desirable: torch.Tensor, kl: torch.Tensor, beta: float, loss_type: str,
               desirable_weight: float, undesirable_weight: float) -> torch.Tensor:
    """Each row's loss (B) from its log-ratio (B), its label (B, bool) and the reference point kl (a scalar)."""
    if loss_type == "kto":
        losses = torch.where(desirable, 1 - F.sigmoid(beta * (logratios - kl)), 1 - F.sigmoid(beta * (kl - logratios)))
    else:  # apo_zero_unpaired
        losses = torch.where(desirable, 1 - F.sigmoid(beta * logratios), F.sigmoid(beta * logratios))
    weights = torch.where(desirable, desirable_weight, undesirable_weight).to(losses.dtype)
    return weights * losses


def unbalanced_weights_line(desirables: int, undesirables: int, desirable_weight: float,
                            undesirable_weight: float) -> str | None:
    """TRL's advice for unequal numbers of desirable and undesirable rows (the KTO paper's eq. 8: desirable_weight x
    desirables / (undesirable_weight x undesirables) in [1, 4/3]): the line when neither weight is in its range."""
    desirables, undesirables = max(desirables, 1), max(undesirables, 1)
    if desirables == undesirables:
        return None
    balance = undesirables * undesirable_weight / desirables  # the desirable weight that balances them
    low, high = round(balance, 2), round(balance * 1.33, 2)
    other = desirables * desirable_weight / undesirables  # the undesirable weight that balances them
    other_low, other_high = round(other / 1.33, 2), round(other, 2)
    if low <= desirable_weight <= high or other_low <= undesirable_weight <= other_high:
        return None
    return (f"the training rows hold {desirables} desirable and {undesirables} undesirable completions, and "
            f"algo.desirable_weight={desirable_weight:g}, algo.undesirable_weight={undesirable_weight:g} do not "
            f"balance them as the KTO paper advises: set algo.desirable_weight in [{low:g}, {high:g}] or "
            f"algo.undesirable_weight in [{other_low:g}, {other_high:g}] (not both).")


class KTOModule(PolicyPairModule):
    """model: the policy's spec (as the RL modules': name_or_path, lora, ...); optimizer: a partial of a torch
    optimizer (AdamW at lr 5e-6 by default, as DPO's: TRL's 1e-6 is for full fine-tuning of large models)."""

    trains_on = "labelled completions"  # the batches it takes (a data module's `batches`), checked at a fit's start

    def __init__(self, model: dict[str, Any], optimizer: Any = None, beta: float = 0.1, loss_type: str = "kto",
                 desirable_weight: float = 1.0, undesirable_weight: float = 1.0,
                 logits_chunk_size: int | None = 1024, logits_budget_mib: float | None = 512.0,
                 sync_ref_model: bool = False,
                 ref_model_mixup_alpha: float = REFERENCE_SYNC_DEFAULTS["ref_model_mixup_alpha"],
                 ref_model_sync_steps: int = REFERENCE_SYNC_DEFAULTS["ref_model_sync_steps"],
                 router_aux_loss_coef: float = 0.001):
        super().__init__()
        check_choice("loss_type", loss_type, LOSS_TYPES)
        check_number("beta", beta, minimum=0, strictly=True)
        for name, weight in (("desirable_weight", desirable_weight), ("undesirable_weight", undesirable_weight)):
            check_number(name, weight, minimum=0, strictly=True)
        check_number("logits_chunk_size", logits_chunk_size, minimum=1, integer=True, optional=True)
        check_number("logits_budget_mib", logits_budget_mib, minimum=0, optional=True)
        check_number("router_aux_loss_coef", router_aux_loss_coef, minimum=0)
        check_optimizer(optimizer)
        check_flag("algo.sync_ref_model", sync_ref_model)
        check_reference_sync_numbers(ref_model_mixup_alpha, ref_model_sync_steps)
        for line in idle_reference_sync(sync_ref_model, ref_model_mixup_alpha, ref_model_sync_steps):
            warn_once(line)
        self.save_hyperparameters({"model": asdict(model_config(model)), "beta": beta, "loss_type": loss_type,
                                   "desirable_weight": desirable_weight, "undesirable_weight": undesirable_weight,
                                   "logits_chunk_size": logits_chunk_size, "logits_budget_mib": logits_budget_mib,
                                   "sync_ref_model": sync_ref_model, "ref_model_mixup_alpha": ref_model_mixup_alpha,
                                   "ref_model_sync_steps": ref_model_sync_steps,
                                   "router_aux_loss_coef": router_aux_loss_coef})
        self.reference_sync = ReferenceSync.of(self.hparams, self.hparams.model)
        self.optimizer_factory = optimizer or functools.partial(torch.optim.AdamW, lr=5e-6)
        self.policy = self.reference = self.tokenizer = None
        self.heldout_rewards = torch.zeros(4, dtype=torch.float64)  # held out: chosen sum, count, rejected sum, count

    def setup(self, stage: str) -> None:
        super().setup(stage)
        datamodule = getattr(self.trainer, "datamodule", None)
        rows = getattr(getattr(datamodule, "hparams", None), "batch_size", None)
        if stage == "fit":
            check_kto_batch_size(self.hparams.loss_type, rows)
        labels = [label for _, label in getattr(datamodule, "train_rows", None) or []]
        hp = self.hparams
        if stage == "fit" and labels and (line := unbalanced_weights_line(
                sum(labels), len(labels) - sum(labels), hp.desirable_weight, hp.undesirable_weight)):
            warn_once(line)

    def load_models(self) -> None:
        self.policy, self.reference = self.reference_sync.own_reference(*self.load_policy_and_reference())
        self.frozen_reference = self.reference.frozen_copy  # registered: it follows the device (full fine-tuning)

    def summed_logprobs(self, model: torch.nn.Module, batch: dict[str, torch.Tensor], prefix: str = "") -> torch.Tensor:
        """Each row's summed completion logprobs (B): the batch's rows, or its KL rows with prefix kl_."""
        rows = {key: batch[prefix + key] for key in ("input_ids", "attention_mask", "response_mask")}
        logprobs, _, _ = token_logprobs(model, rows, self.hparams.logits_chunk_size, self.hparams.logits_budget_mib)
        return logprobs.sum(-1)

    @torch.no_grad()
    def reference_point(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """z: the KL rows' mean log-ratio, the mean of the ranks' means, clamped at 0 (a scalar, no gradient)."""
        policy = self.summed_logprobs(self.policy, batch, "kl_")
        with self.reference_model() as reference:
            kl = (policy - self.summed_logprobs(reference, batch, "kl_")).mean()
        ranks = self.trainer.world_size if self._trainer is not None else 1
        return (self.summed_over_ranks(kl) / ranks).clamp(min=0)

    def step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        hp = self.hparams
        logprobs, values, response = token_logprobs(self.policy, batch, hp.logits_chunk_size, hp.logits_budget_mib,
                                                    statistics=("entropy", "mean_logit"),
                                                    router_load=self.router_load)  # B,R ; name: B,R
        policy = logprobs.sum(-1)  # B
        with torch.no_grad(), self.reference_model() as reference:
            reference_logprobs = self.summed_logprobs(reference, batch)  # B
        # apo_zero_unpaired has no reference point: no KL rows' forwards, kl logged as 0 (as TRL)
        kl = self.reference_point(batch) if hp.loss_type == "kto" else torch.zeros((), device=self.device)
        desirable = batch["label"]  # B
        logratios = policy - reference_logprobs
        loss = kto_losses(logratios, desirable, kl, hp.beta, hp.loss_type, hp.desirable_weight,
                          hp.undesirable_weight).mean()
        rewards = hp.beta * logratios.detach()  # B
        prefix = "" if stage == "train" else "eval/"
        self.log_metrics({prefix + "loss": loss.detach(), prefix + "kl": kl}, len(desirable), stage)
        chosen, rejected = desirable[:, None].float(), (~desirable)[:, None].float()  # B,1: the rows as "tokens"
        chosen_tokens, rejected_tokens = response * chosen, response * rejected  # B,R
        means = self.log_token_means({"rewards/chosen": (rewards[:, None], chosen),
                                      "rewards/rejected": (rewards[:, None], rejected),
                                      "logps/chosen": (policy.detach()[:, None], chosen),
                                      "logps/rejected": (policy.detach()[:, None], rejected),
                                      "logits/chosen": (values["mean_logit"], chosen_tokens),
                                      "logits/rejected": (values["mean_logit"], rejected_tokens),
                                      "entropy": (values["entropy"], response)}, stage)  # TRL's names
        if stage == "train":
            if "rewards/chosen" in means and "rewards/rejected" in means:
                self.log_metrics({"rewards/margins": means["rewards/chosen"] - means["rewards/rejected"]}, 1, stage)
            self.count_tokens(batch["attention_mask"])
        else:  # the margin of the held-out means, at the epoch's end
            self.heldout_rewards += torch.stack([(rewards * desirable).sum(), desirable.sum(),
                                                 (rewards * ~desirable).sum(), (~desirable).sum()]).double().cpu()
        return self.with_router_loss(loss, len(desirable), stage)

    def on_validation_epoch_start(self) -> None:
        self.heldout_rewards = torch.zeros(4, dtype=torch.float64)

    def on_validation_epoch_end(self) -> None:
        chosen, chosen_rows, rejected, rejected_rows = self.summed_over_ranks(
            self.heldout_rewards.to(self.device)).tolist()
        if chosen_rows and rejected_rows:
            # the same on every rank (summed above): sync_dist only keeps Lightning from asking for it
            self.log("eval/rewards/margins", chosen / chosen_rows - rejected / rejected_rows, prog_bar=True,
                     sync_dist=True)
        super().on_validation_epoch_end()

    def on_fit_start(self) -> None:
        super().on_fit_start()
        self.reference_sync.check(self, sharded=is_sharded(self.policy))
