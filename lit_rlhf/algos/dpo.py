"""DPOModule: Direct Preference Optimization on preference pairs, the offline baseline the RL modules are compared
with. The reference is shared as in the RL modules: with LoRA, the policy with its adapters disabled.

    logits = beta * ((log pi(y_c|x) - log ref(y_c|x)) - (log pi(y_r|x) - log ref(y_r|x)))
    loss   = -log sigmoid(logits)

(TRL's DPOTrainer, loss_type "sigmoid"; log pi(y|x) sums the response tokens' logprobs); loss_type selects TRL's
other preference losses (IPO, hinge, robust, ...: lit_rlhf.algos.dpo_losses), several at once weighted by
loss_weights. With cdpo_epsilon > 0, the sigmoid loss is conservative DPO (Mitchell 2023: each label flipped with
probability epsilon), a form of its own:

    loss   = -(1 - cdpo_epsilon) * log sigmoid(logits) - cdpo_epsilon * log sigmoid(-logits)

With ld_alpha (LD-DPO), each pair's longer response counts its tokens past the shorter one's length by that
weight. With use_weighting (WPO), each pair's loss is weighted by how likely the policy finds its responses. With
precompute_ref_log_probs, the reference scores every pair once before training and a full fine-tune's frozen copy is
freed.

Metrics after TRL's: rewards/chosen and rewards/rejected (beta * (log pi - log ref), means), rewards/accuracies
(chosen above rejected), rewards/margins, logps/chosen, logps/rejected, entropy, mean_token_accuracy (the chosen
responses' tokens that are the policy's most likely token), logits/chosen and logits/rejected (the mean logit over
the vocabulary at the responses' tokens), num_tokens (the training batches' tokens so far); with use_weighting,
wpo_weight (the mean pair weight); on held-out pairs with the eval/ prefix.

With sync_ref_model (TRL's, TR-DPO): every ref_model_sync_steps optimizer steps the reference <- alpha x policy +
(1 - alpha) x reference (lit_rlhf.step.reference_sync; with LoRA a reference adapter reset to the trained one).

Shapes: B pairs, L sequence length; a batch holds the B chosen sequences, then the B rejected (2B,L).
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from lit_rlhf.algos.dpo_losses import DPOLoss, PairLogprobs, wpo_weights
from lit_rlhf.algos.pair_module import PolicyPairModule
from lit_rlhf.config import model_config
from lit_rlhf.config.idle import REFERENCE_SYNC_DEFAULTS, idle_reference_sync
from lit_rlhf.config.validation import (
    check_flag,
    check_number,
    check_optimizer,
    check_reference_sync_numbers,
    warn_once,
)
from lit_rlhf.data.preferences import collate_pairs
from lit_rlhf.distributed.sharding import is_sharded
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.forwards import right_padded_logprobs_and_statistics
from lit_rlhf.models.router_load import RouterLoad
from lit_rlhf.step.reference_sync import ReferenceSync


def sequence_logprobs(model: torch.nn.Module, batch: dict[str, torch.Tensor], chunk_size: int | None = None,
                      logits_budget_mib: float | None = None, ld_alpha: float | None = None,
                      pad_token_id: int | None = None) -> torch.Tensor:
    """Sum of the logprobs of each sequence's response tokens (response_mask); with ld_alpha, the tokens past the
    shorter response of the pair weighted by it (length_desensitized_weights). -> 2B"""
    logprobs, _, response = token_logprobs(model, batch, chunk_size, logits_budget_mib, pad_token_id)
    return weighted_sums(logprobs, response, ld_alpha)


def token_logprobs(model: torch.nn.Module, batch: dict[str, torch.Tensor], chunk_size: int | None = None,
                   logits_budget_mib: float | None = None, pad_token_id: int | None = None,
                   statistics: tuple[str, ...] = (), router_load: RouterLoad | None = None
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    """The logprob of each response token and the named ops.logprobs.TOKEN_STATISTICS there (the entropy, ...: no
    gradient), 0 elsewhere, and the response mask they are laid out by, through the RL modules' logprob forwards
    (temperature 1): chunked from the last hidden states with chunk_size, and then, given the pad_token_id, on packed
    sequences (padding-free) where the model keeps them apart. -> (2B,L-1), name: (2B,L-1), (2B,L-1)"""
    response = batch["response_mask"][:, 1:]  # token t+1 is predicted at position t
    logprobs, values = right_padded_logprobs_and_statistics(model, batch["input_ids"], batch["attention_mask"],
                                                            response, chunk_size, pad_token_id, logits_budget_mib,
                                                            statistics, router_load=router_load)
    return logprobs, values, response


def weighted_sums(logprobs: torch.Tensor, response: torch.Tensor, ld_alpha: float | None) -> torch.Tensor:
    """Each sequence's summed response-token logprobs (2B,R; response: their mask), LD-DPO's weights applied with
    ld_alpha. -> 2B"""
    if ld_alpha is not None:
        logprobs = logprobs * length_desensitized_weights(response, ld_alpha)
    return logprobs.sum(-1)


def length_desensitized_weights(response: torch.Tensor, ld_alpha: float) -> torch.Tensor:
    """LD-DPO (Liu et al. 2024) as TRL's ld_alpha: each pair's first min(n_chosen, n_rejected) response tokens weigh 1,
    the longer response's tokens past them ld_alpha, everything else 0. response: the (2B,T) response mask of a batch
    of B chosen then B rejected sequences. -> 2B,T"""
    response = response.to(torch.float32)
    position = response.cumsum(-1)  # 1, 2, ... along each response
    shared = torch.minimum(*response.sum(-1).chunk(2)).repeat(2)  # 2B
    tail = position > shared[:, None]
    return response * torch.where(tail, torch.full_like(response, ld_alpha), torch.ones_like(response))


class DPOModule(PolicyPairModule):
    """model: the policy's spec (as the RL modules': name_or_path, lora, ...); optimizer: a partial of a torch
    optimizer (AdamW at lr 5e-6 by default, TRL's DPO default 1e-6 is for full fine-tuning of large models)."""

    trains_on = "preference pairs"  # the batches it takes (a data module's `batches`), checked at a fit's start

    def __init__(self, model: dict[str, Any], optimizer: Any = None, beta: float = 0.1, cdpo_epsilon: float = 0.0,
                 loss_type: str | list[str] = "sigmoid", loss_weights: list[float] | None = None,
                 label_smoothing: float = 0.0, discopop_tau: float = 0.05, f_divergence_type: str = "reverse_kl",
                 f_alpha_divergence_coef: float = 0.5, use_weighting: bool = False, ld_alpha: float | None = None,
                 precompute_ref_log_probs: bool = False, precompute_ref_batch_size: int | None = None,
                 padding_free: bool = False, logits_chunk_size: int | None = 1024,
                 logits_budget_mib: float | None = 512.0, sync_ref_model: bool = False,
                 ref_model_mixup_alpha: float = REFERENCE_SYNC_DEFAULTS["ref_model_mixup_alpha"],
                 ref_model_sync_steps: int = REFERENCE_SYNC_DEFAULTS["ref_model_sync_steps"],
                 router_aux_loss_coef: float = 0.001):
        super().__init__()
        loss = DPOLoss(loss_type, loss_weights, beta, label_smoothing, cdpo_epsilon, discopop_tau, f_divergence_type,
                       f_alpha_divergence_coef, use_weighting)  # checks them
        check_number("ld_alpha", ld_alpha, minimum=0, optional=True)
        if ld_alpha is not None and ld_alpha > 1:
            raise ConfigError(f"algo.ld_alpha={ld_alpha} must be in [0, 1] (1: plain DPO; null: off).")
        check_number("logits_chunk_size", logits_chunk_size, minimum=1, integer=True, optional=True)
        check_number("logits_budget_mib", logits_budget_mib, minimum=0, optional=True)
        check_number("router_aux_loss_coef", router_aux_loss_coef, minimum=0)
        check_optimizer(optimizer)
        check_flag("algo.sync_ref_model", sync_ref_model)
        check_flag("algo.precompute_ref_log_probs", precompute_ref_log_probs)
        check_flag("algo.padding_free", padding_free)
        if precompute_ref_batch_size is not None:  # null: data.batch_size
            check_number("precompute_ref_batch_size", precompute_ref_batch_size, minimum=1, integer=True)
        if precompute_ref_log_probs and sync_ref_model:  # as TRL
            raise ConfigError("algo.precompute_ref_log_probs=true scores a fixed reference once, and algo."
                              "sync_ref_model=true moves it during training; set one of them to false.")
        check_reference_sync_numbers(ref_model_mixup_alpha, ref_model_sync_steps)
        for line in idle_reference_sync(sync_ref_model, ref_model_mixup_alpha, ref_model_sync_steps):
            warn_once(line)
        self.save_hyperparameters({"model": asdict(model_config(model)), **asdict(loss), "ld_alpha": ld_alpha,
                                   "precompute_ref_log_probs": precompute_ref_log_probs,
                                   "precompute_ref_batch_size": precompute_ref_batch_size, "padding_free": padding_free,
                                   "logits_chunk_size": logits_chunk_size, "logits_budget_mib": logits_budget_mib,
                                   "sync_ref_model": sync_ref_model, "ref_model_mixup_alpha": ref_model_mixup_alpha,
                                   "ref_model_sync_steps": ref_model_sync_steps,
                                   "router_aux_loss_coef": router_aux_loss_coef})
        self.preference_loss = loss
        self.reference_sync = ReferenceSync.of(self.hparams, self.hparams.model)
        self.optimizer_factory = optimizer or functools.partial(torch.optim.AdamW, lr=5e-6)
        self.policy = self.reference = self.tokenizer = None

    @property
    def packing_pad_id(self) -> int | None:
        """algo.padding_free: the pad token of the packed forwards (None: the padded layout)."""
        return self.tokenizer.pad_token_id if self.hparams.get("padding_free") and self.tokenizer else None

    def load_models(self) -> None:
        self.policy, self.reference = self.reference_sync.own_reference(*self.load_policy_and_reference())
        self.frozen_reference = self.reference.frozen_copy  # registered: it follows the device (full fine-tuning)
        if self.hparams.precompute_ref_log_probs and self.frozen_reference is not None:
            # DDP would hold the copy's tensors that the precomputed pass frees; it has nothing to sync in them
            frozen = [f"frozen_reference.{name}" for name, _ in (*self.frozen_reference.named_parameters(),
                                                                 *self.frozen_reference.named_buffers())]
            DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(self, frozen)

    def step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        hp = self.hparams
        statistics = ("entropy", "top1", "mean_logit") + (("log_sum_p2",) if hp.use_weighting else ())
        logprobs, values, response = token_logprobs(self.policy, batch, hp.logits_chunk_size, hp.logits_budget_mib,
                                                    self.packing_pad_id, statistics, self.router_load)  # 2B,R each
        policy_chosen, policy_rejected = weighted_sums(logprobs, response, hp.ld_alpha).chunk(2)  # B, B
        reference_chosen, reference_rejected = self.reference_logprobs(batch).chunk(2)  # B, B
        chosen_tokens, rejected_tokens = batch["response_mask"].sum(-1).chunk(2)  # B, B
        pairs = PairLogprobs(policy_chosen, policy_rejected, reference_chosen, reference_rejected, chosen_tokens,
                             rejected_tokens)
        weights = wpo_weights(logprobs, values["log_sum_p2"], response) if hp.use_weighting else None  # B
        loss = self.preference_loss(pairs, weights)
        chosen, rejected = hp.beta * pairs.chosen_logratios.detach(), hp.beta * pairs.rejected_logratios.detach()  # B
        prefix = "" if stage == "train" else "eval/"
        metrics = {"loss": loss.detach(), "rewards/chosen": chosen.mean(), "rewards/rejected": rejected.mean(),
                   "rewards/accuracies": (chosen > rejected).float().mean(),
                   "rewards/margins": (chosen - rejected).mean(), "logps/chosen": policy_chosen.detach().mean(),
                   "logps/rejected": policy_rejected.detach().mean()}
        if weights is not None:
            metrics["wpo_weight"] = weights.mean()
        self.log_metrics({prefix + k: v for k, v in metrics.items()}, len(chosen), stage)  # TRL's names
        chosen_response, rejected_response = response.chunk(2)  # B,R each
        chosen_top1, _ = values["top1"].chunk(2)
        chosen_logits, rejected_logits = values["mean_logit"].chunk(2)
        self.log_token_means({"entropy": (values["entropy"], response),
                              "mean_token_accuracy": (chosen_top1, chosen_response),
                              "logits/chosen": (chosen_logits, chosen_response),
                              "logits/rejected": (rejected_logits, rejected_response)}, stage)
        if stage == "train":
            self.count_tokens(batch["attention_mask"])
        return self.with_router_loss(loss, len(chosen), stage)

    @torch.no_grad()
    def reference_logprobs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The reference's summed response logprobs of a batch's sequences: precomputed, or a forward now. -> 2B"""
        hp = self.hparams
        if hp.precompute_ref_log_probs and "reference_logprobs" in batch:  # (another module's fit may have left some)
            return batch["reference_logprobs"].to(self.device)
        if self.reference is None:
            raise ConfigError("algo.precompute_ref_log_probs=true freed the reference after scoring the data module's "
                              "pairs, and this batch holds pairs it did not score; pass those pairs through the "
                              "same data module before the fit, or set algo.precompute_ref_log_probs=false.")
        with self.reference_model() as reference:
            return sequence_logprobs(reference, batch, hp.logits_chunk_size, hp.logits_budget_mib, hp.ld_alpha,
                                     self.packing_pad_id)

    def on_fit_start(self) -> None:
        super().on_fit_start()
        self.reference_sync.check(self, sharded=is_sharded(self.policy))
        if self.hparams.precompute_ref_log_probs and self.reference is not None:
            self.precompute_reference_logprobs()

    def precompute_reference_logprobs(self) -> None:
        """TRL's precompute_ref_log_probs: the reference scores every training and held-out pair of the data module
        once, before the first step (each rank all of them, in the training's precision), and a full fine-tune's
        frozen copy is then freed: a step runs the policy alone."""
        datamodule = getattr(self.trainer, "datamodule", None)
        if not isinstance(getattr(datamodule, "train_pairs", None), list):
            raise ConfigError("algo.precompute_ref_log_probs=true scores the pairs of a PreferenceDataModule before "
                              "the fit, and this fit has none; pass one (datamodule=...) or set it to false.")
        size = self.hparams.precompute_ref_batch_size or datamodule.hparams.batch_size
        pad = datamodule.tokenizer.pad_token_id
        with self.trainer.precision_plugin.forward_context():
            for items in (datamodule.train_pairs, datamodule.eval_pairs):
                for start in range(0, len(items), size):
                    # scored afresh: values an earlier fit left on the pairs (another model's) are not read
                    chunk = [{k: v for k, v in item.items() if k != "reference_logprobs"}
                             for item in items[start:start + size]]
                    batch = {k: v.to(self.device) for k, v in collate_pairs(chunk, pad).items()}
                    chosen, rejected = self.reference_logprobs(batch).float().chunk(2)  # B, B
                    for item, pair in zip(items[start:start + size], zip(chosen.tolist(), rejected.tolist(),
                                                                       strict=True), strict=True):
                        item["reference_logprobs"] = pair
        if self.reference.frozen_copy is not None:
            self.frozen_reference = None  # its memory: the steps no longer read it
            self.reference = None

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        # a fit that freed its frozen copy saved none: the copy is the model's files, as this module loaded them
        if self.hparams.precompute_ref_log_probs and self.frozen_reference is not None:
            state = checkpoint.setdefault("state_dict", {})
            if not any(key.startswith("frozen_reference.") for key in state):
                state.update({f"frozen_reference.{k}": v for k, v in self.frozen_reference.state_dict().items()})
