"""SFTModule: supervised fine-tuning on (prompt, completion) rows, completion-only: the cross-entropy of the
completion's tokens given the prompt and the completion before them, averaged over the completion tokens of every
rank's batch and, with gradient accumulation, of every batch of the optimizer step (algos.accumulation; the prompt's
tokens are context, never trained on), as TRL's SFTTrainer with completion_only_loss. The off-policy baseline of
on-policy distillation (SFT on a teacher's samples), and the first stage of SFT -> reward model -> RL.

    loss = -(sum over completion tokens of log p(y_t | x, y_<t)) / (completion tokens)

loss_type (TRL's names): nll (the default; chunked_nll the same), or dft (Dynamic Fine-Tuning, Wu et al. 2025: each
token's term weighted by its probability p(y_t | x, y_<t), taken as a constant). padding_free (TRL's name): the
forwards on packed rows, no padding computed (models.packing).

Metrics after TRL's: loss, entropy (the mean entropy of the predicted distribution on completion tokens),
mean_token_accuracy (the share of completion tokens that are the most likely token), num_tokens (the tokens of the
training batches so far, prompts included), and num_completion_tokens (those trained on); on held-out rows eval/loss,
eval/entropy, eval/mean_token_accuracy.

Shapes: B rows, L sequence length (right-padded).
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from typing import Any

import torch

from lit_rlhf.algos.accumulation import TokenMeanOverWindow
from lit_rlhf.algos.pair_module import PolicyPairModule
from lit_rlhf.config import model_config
from lit_rlhf.config.validation import check_choice, check_flag, check_number, check_optimizer
from lit_rlhf.models.forwards import right_padded_logprobs_and_statistics
from lit_rlhf.models.router_load import RouterLoad


def completion_logprobs(model: torch.nn.Module, batch: dict[str, torch.Tensor], chunk_size: int | None = None,
                        logits_budget_mib: float | None = None, statistics: tuple[str, ...] = ("entropy",),
                        pad_token_id: int | None = None, router_load: RouterLoad | None = None
                        ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    """The logprob and the named ops.logprobs.TOKEN_STATISTICS of every token after the first (B,L-1 each, zero off
    the completion), through the RL modules' logprob forward (temperature 1; padding-free given the pad_token_id),
    and the completion mask (B,L-1)."""
    mask = batch["response_mask"][:, 1:]  # B,L-1  token t+1 is predicted at position t
    logprobs, values = right_padded_logprobs_and_statistics(model, batch["input_ids"], batch["attention_mask"], mask,
                                                            chunk_size, pad_token_id, logits_budget_mib, statistics,
                                                            router_load=router_load)
    return logprobs, values, mask


LOSS_TYPES = ("nll", "chunked_nll", "dft")  # TRL's SFT loss types (nll and chunked_nll: the same loss here)


class SFTModule(PolicyPairModule):
    """model: the policy's spec (as the RL modules': name_or_path, lora, adapter_path, ...; lora=null trains every
    weight); optimizer: a partial of a torch optimizer (AdamW at lr 2e-5 by default, TRL's SFT default)."""

    trains_on = "completions"  # the batches it takes (a data module's `batches`), checked at a fit's start

    def __init__(self, model: dict[str, Any], optimizer: Any = None, loss_type: str = "nll",
                 padding_free: bool = False, logits_chunk_size: int | None = 1024,
                 logits_budget_mib: float | None = 512.0, router_aux_loss_coef: float = 0.001):
        super().__init__()
        check_choice("loss_type", loss_type, LOSS_TYPES)
        check_flag("algo.padding_free", padding_free)
        check_number("logits_chunk_size", logits_chunk_size, minimum=1, integer=True, optional=True)
        check_number("logits_budget_mib", logits_budget_mib, minimum=0, optional=True)
        check_number("router_aux_loss_coef", router_aux_loss_coef, minimum=0)
        check_optimizer(optimizer)
        self.save_hyperparameters({"model": asdict(model_config(model)), "loss_type": loss_type,
                                   "padding_free": padding_free, "logits_chunk_size": logits_chunk_size,
                                   "logits_budget_mib": logits_budget_mib,
                                   "router_aux_loss_coef": router_aux_loss_coef})
        self.optimizer_factory = optimizer or functools.partial(torch.optim.AdamW, lr=2e-5)
        self.policy = self.tokenizer = None
        self.num_completion_tokens = 0  # completion tokens trained on, over all ranks
        self.window = TokenMeanOverWindow()  # the training loss over the accumulation window's tokens
        self.opens_window = True  # whether the training micro-batch in hand starts an optimizer step's gradients

    def load_models(self) -> None:
        self.policy, _ = self.load_policy_and_reference()  # no reference used: SFT has no KL term
        self.policy.train()  # the whole model trains as TRL's SFTTrainer's does (from_pretrained loads it in eval mode)

    @property
    def packing_pad_id(self) -> int | None:
        """algo.padding_free: the pad token of the packed forwards (None: the padded layout)."""
        return self.tokenizer.pad_token_id if self.hparams.get("padding_free") and self.tokenizer else None

    def step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        hp = self.hparams
        logprobs, values, mask = completion_logprobs(self.policy, batch, hp.logits_chunk_size, hp.logits_budget_mib,
                                                     ("entropy", "top1"), self.packing_pad_id, self.router_load)
        tokens = mask.sum()
        # dft: each token's loss weighted by its probability (no gradient through the weight)
        weights = logprobs.detach().exp() if hp.loss_type == "dft" else 1.0
        total = -(weights * logprobs).sum()
        router_loss = self.router_loss(len(batch["input_ids"]), stage)  # a MoE policy's (None: none)
        if stage == "train":
            # over every rank's completion tokens of the optimizer step's micro-batches, as TRL's num_items_in_batch
            all_tokens = int(self.summed_over_ranks(tokens.detach().long()))
            trainer = self.trainer if self._trainer is not None else None
            ranks, accumulate = (trainer.world_size, trainer.accumulate_grad_batches) if trainer else (1, 1)
            # a MoE policy's router loss weighs as many tokens' losses as the micro-batch holds: the window's token
            # mean, whose earlier gradients the window rescales, then holds the micro-batches' token-weighted mean of it
            routed = total if router_loss is None else total + router_loss * tokens
            loss = self.window.loss(routed, all_tokens, ranks, accumulate, self.opens_window)
            logged = total.detach() * ranks / max(all_tokens, 1)  # the ranks' mean: this micro-batch's token mean
            self.count_tokens(batch["attention_mask"])
            self.num_completion_tokens += all_tokens
            self.log("num_completion_tokens", float(self.num_completion_tokens), on_step=True, on_epoch=False)
        else:
            loss = logged = total / tokens.clamp(min=1)
            loss = loss if router_loss is None else loss + router_loss
        self.log_metrics({("" if stage == "train" else "eval/") + "loss": logged.detach()}, len(batch["input_ids"]),
                         stage)
        self.log_token_means({"entropy": (values["entropy"], mask), "mean_token_accuracy": (values["top1"], mask)},
                             stage)  # TRL's names
        return loss

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        # Lightning zeroes the gradients before the backward of each window's first micro-batch: on this condition
        self.opens_window = batch_idx % self.trainer.accumulate_grad_batches == 0
        return super().training_step(batch, batch_idx)

    def on_before_backward(self, loss: torch.Tensor) -> None:
        # the optimizer's parameters, which hold the gradients: under trainer=fsdp2 the model's root, gathered since
        # the forward, lists its whole weights, whose gradients are kept on the shards the optimizer steps
        optimizer = self.optimizers()
        self.window.rescale_gradients(p for group in optimizer.param_groups for p in group["params"])

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["num_completion_tokens"] = self.num_completion_tokens

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        # a checkpoint written before num_tokens counted prompts held the completion tokens under that name
        self.num_completion_tokens = checkpoint.get("num_completion_tokens", checkpoint.get("num_tokens", 0))
