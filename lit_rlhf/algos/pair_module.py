"""PairModule: what the modules trained offline on a file of rows share (DPO and reward models on preference pairs, KTO
on labelled completions, SFT on completions). A loss or gradient that goes non-finite stops the run in one line before
the update applies it, no model folder is ever written from non-finite weights, and a resume that would train
something else (other settings, another data file) is one line, as the RL modules' resumes.

Shapes: a batch of pairs holds the B chosen sequences, then the B rejected (2B,L); a batch of completions B rows."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from lightning.pytorch.utilities import rank_zero_warn

from lit_rlhf.algos.data_checks import check_data_module
from lit_rlhf.algos.gradient_reach import ChecksGradientReach
from lit_rlhf.algos.loading import BuildsModelsToLoadState, load_pair_module_as
from lit_rlhf.algos.pair_sharding import (
    any_rank_not_finite,
    fsdp2_strategy,
    loads_sharded,
    policy_to_save,
    resharded_root,
    shard_policy_models,
)
from lit_rlhf.checkpoints.loading import use_safe_checkpoint_io
from lit_rlhf.checkpoints.loop_state import (
    keep_a_cut_epoch_unfinished,
    loop_state_as_lightning_restores_it,
    stopped_mid_epoch,
)
from lit_rlhf.checkpoints.resume_checks import check_resume
from lit_rlhf.checkpoints.run_identity import path_digest
from lit_rlhf.data.epoch_shuffle import shards_rows
from lit_rlhf.distributed.process_group_exit import destroy_process_group_at_exit
from lit_rlhf.distributed.sharding import is_sharded, local_tensor
from lit_rlhf.errors import ConfigError
from lit_rlhf.interrupts import EndOfRunInterrupted
from lit_rlhf.models import load_model_tokenizer, load_policy
from lit_rlhf.models.export import export_model
from lit_rlhf.models.policy import Reference
from lit_rlhf.models.router_load import RouterLoad, router_load_of
from lit_rlhf.ops.finite import all_finite

# which script trains which
SCRIPTS = {"DPOModule": "train_dpo.py", "RewardModelModule": "train_reward_model.py", "SFTModule": "train_sft.py",
           "KTOModule": "train_kto.py"}


def learning_rate(module: L.LightningModule) -> str:
    try:
        return f"{module.optimizers().param_groups[0]['lr']:g}"
    except (AttributeError, RuntimeError, IndexError, KeyError):
        return "?"


def stop_unless_finite(module: L.LightningModule, what: str, tensors: Iterable[torch.Tensor],
                       sharded: bool = False) -> None:
    """One line when `what` (the loss, the gradients) holds NaN or inf: the run stops before the optimizer applies it,
    so the weights, checkpoints and saved folders stay finite. sharded: the tensors are shards (trainer=fsdp2), each
    rank checks its own and every rank stops if any found one."""
    tensors = [local_tensor(t.detach()) for t in tensors if t is not None]
    finite = all_finite(tensors)
    if (not any_rank_not_finite(module, finite)) if sharded else finite:
        return
    raise ConfigError(f"training step {module.global_step}: the {what} is not finite (NaN or inf), so the run stops "
                      f"before the update applies it and saves no model; lower algo.optimizer.lr (now "
                      f"{learning_rate(module)}) or check the data (e.g. the pairs' margins).")


def save_pairs_identity(module: L.LightningModule, checkpoint: dict) -> None:
    """A digest of the pairs file the run trains on, beside the settings Lightning saves, for the resume check."""
    datamodule = getattr(module.trainer, "datamodule", None) if module._trainer is not None else None
    dataset = getattr(getattr(datamodule, "hparams", None), "dataset", None)
    checkpoint["pairs_identity"] = {"data.dataset": path_digest(dataset), "module": type(module).__name__,
                                    "ranks_dealt": ranks_dealt(module)}


def check_pairs_resume(module: L.LightningModule, checkpoint: dict) -> None:
    """A resume continues the checkpoint's run: the same algorithm settings and the same pairs (by the file's
    digest), or one line naming what changed, as the RL scripts' resumes."""
    written_by = SCRIPTS.get((checkpoint.get("pairs_identity") or {}).get("module"))
    if "rlhf_state" in checkpoint:
        written_by = "train.py (an RL run)"
    if written_by is not None and written_by != SCRIPTS.get(type(module).__name__):
        raise ConfigError(f"ckpt_path holds a checkpoint of {written_by}, not of {SCRIPTS.get(type(module).__name__)}; "
                          f"resume with the script that wrote it, or give a checkpoint this script wrote.")
    datamodule = getattr(module.trainer, "datamodule", None) if module._trainer is not None else None
    data = dict(datamodule.hparams) if datamodule is not None else None
    check_resume(checkpoint.get("hyper_parameters", {}), dict(module.hparams),
                 checkpoint.get("datamodule_hyper_parameters"), data)
    saved = (checkpoint.get("pairs_identity") or {}).get("data.dataset")
    current = path_digest(data.get("dataset")) if data else None
    if saved is not None and current is not None and saved != current:
        raise ConfigError(f"resume changes data.dataset (its file differs from the checkpoint's run: "
                          f"{str(data.get('dataset'))[:200]!r}); an exact resume needs the same pairs: restore the "
                          f"file, or start a new run.")
    warn_if_ranks_changed(module, checkpoint)


def warn_if_ranks_changed(module: L.LightningModule, checkpoint: dict) -> None:
    """Each rank's rows of an epoch are dealt for the fit's number of ranks: a fit stopped mid-epoch and resumed on
    another number goes on with the rows dealt for the new one, so some of that epoch's rows are trained on twice and
    some not at all (the epochs after it are whole)."""
    saved = (checkpoint.get("pairs_identity") or {}).get("ranks_dealt")
    ranks = ranks_dealt(module)
    if (isinstance(saved, int) and not isinstance(saved, bool) and saved != ranks
            and stopped_mid_epoch(checkpoint.get("loops", {}).get("fit_loop", {}))):
        rank_zero_warn(f"ckpt_path was written by a fit on {saved} rank(s) and this one runs on {ranks}: the rest of "
                       f"the epoch it stopped in is dealt for {ranks}, so some of that epoch's rows are trained on "
                       f"twice and some not at all (later epochs are whole); resume on {saved} rank(s) to continue "
                       f"exactly.")


def ranks_dealt(module: L.LightningModule) -> int:
    """Among how many ranks the fit deals each epoch's rows (1 when every rank reads them all)."""
    trainer = module.trainer if module._trainer is not None else None
    return trainer.world_size if trainer is not None and shards_rows(trainer) else 1


class PairModule(BuildsModelsToLoadState, ChecksGradientReach, L.LightningModule):
    """A subclass defines step(batch, stage) -> the loss (stage: train or val), logging its metrics."""

    num_tokens = 0  # TRL's num_tokens: the tokens of every training batch so far, over all ranks (count_tokens)

    def step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        raise NotImplementedError

    training_finished = False  # set at the end of training (last.ckpt written), before the save and held-out figures

    shards = False  # whether configure_model shards the models under Lightning's ModelParallelStrategy (trainer=fsdp2)

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path, map_location=None, hparams_file=None, strict=None,
                             weights_only=None, *, trust_remote_code: bool = False, **settings: Any):
        """Lightning's load_from_checkpoint (`settings` override the checkpoint's), in train mode, with the file read
        weights-only and the model's own Python code run only with trust_remote_code=True here, whatever the
        checkpoint's model.trust_remote_code says. `map_location`: a device to move it to."""
        return load_pair_module_as(cls, checkpoint_path, map_location, hparams_file, strict, weights_only,
                                   trust_remote_code, **settings)

    def setup(self, stage: str) -> None:
        destroy_process_group_at_exit()
        use_safe_checkpoint_io(self.trainer)  # atomic writes, weights-only loads, no non-finite weights
        if isinstance(self.trainer.strategy, ModelParallelStrategy) and not self.shards:  # trainer=fsdp2
            # its configure_model loads whole models and shards none: every rank would train a copy of its own, its
            # gradients never shared, and rank zero's would be saved
            raise ConfigError(f"trainer=fsdp2 shards the models of train.py, train_dpo.py, train_kto.py, "
                              f"train_sft.py and train_reward_model.py, not {type(self).__name__}'s; train on several "
                              f"ranks with trainer=ddp (data parallel).")

    def on_fit_start(self) -> None:
        check_data_module(self, getattr(self.trainer, "datamodule", None), getattr(self, "tokenizer", None))

    def on_train_start(self) -> None:
        self.training_finished = False

    def on_train_end(self) -> None:
        self.training_finished = True  # callbacks' on_train_end (the final checkpoint) ran before this hook
        if self.trainer.received_sigterm:  # in the last step or the final checkpoint's write: Lightning goes on
            raise EndOfRunInterrupted("SIGTERM")

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.step(batch, "train")
        stop_unless_finite(self, "loss", [loss])
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.step(batch, "val")

    def log_metrics(self, metrics: dict[str, torch.Tensor], batch_size: int, stage: str) -> None:
        """Training: per step (an epoch's mean after a resume would cover only the batches since), the mean of the
        ranks' figures (each rank's batch is as large), as TRL gathers them. Held out: the means over every rank's
        held-out rows (Lightning adds the ranks' batch-size-weighted sums and counts before it divides). Without
        sync_dist either would be rank zero's share alone."""
        training = stage == "train"
        self.log_dict(metrics, batch_size=batch_size, on_step=training, on_epoch=not training, prog_bar=not training,
                      sync_dist=True)

    def log_token_means(self, means: dict[str, tuple[torch.Tensor, torch.Tensor]],
                        stage: str) -> dict[str, torch.Tensor]:
        """name: (values, mask) of a batch's tokens (N,T each) -> the mean of the values over the masked tokens of
        every rank's batch (token-weighted, as TRL gathers them; held out, over all the held-out tokens). In training
        a name with no masked token on any rank is not logged; the means logged are returned."""
        totals = torch.stack([(values * mask).sum() for values, mask in means.values()])  # K
        counts = torch.stack([mask.sum() for _, mask in means.values()]).to(totals.dtype)  # K
        if stage == "train":
            totals, counts = self.summed_over_ranks(torch.cat([totals, counts])).chunk(2)  # one reduction
            logged = {name: total / count for name, total, count, present in
                      zip(means, totals, counts, (counts > 0).tolist(), strict=True) if present}
            self.log_metrics(logged, 1, stage)
            return logged
        for name, total, count in zip(means, totals, counts.tolist(), strict=True):  # the counts read once
            # Lightning's epoch mean weights each batch by its tokens, and adds the ranks' sums and counts
            self.log(f"eval/{name}", total / max(count, 1), batch_size=int(count), on_step=False, on_epoch=True,
                     sync_dist=True)
        return {}

    def summed_over_ranks(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sum of every rank's tensor (this rank's alone outside a Trainer)."""
        return self.trainer.strategy.reduce(tensor, reduce_op="sum") if self._trainer is not None else tensor

    def count_tokens(self, attention_mask: torch.Tensor) -> None:
        """TRL's num_tokens: adds a training batch's tokens (its attention mask's, prompts included) over every rank,
        and logs the count so far."""
        self.num_tokens += int(self.summed_over_ranks(attention_mask.sum().long()))
        self.log("num_tokens", float(self.num_tokens), on_step=True, on_epoch=False)

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.validated_at_step = self.global_step  # the held-out figures are those of this step

    def held_out_figures_are_stale(self) -> bool:
        """True when training went on after the last evaluation on the held-out rows (or none ran): a fit cut by
        trainer.max_steps in the middle of an epoch, or validating every n epochs."""
        return getattr(self, "validated_at_step", None) != self.global_step

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        stop_unless_finite(self, "gradient", [p.grad for group in optimizer.param_groups for p in group["params"]],
                           sharded=is_sharded(self))

    def trained_state_keys(self) -> set[str]:
        """What a resume from a sharded checkpoint (trainer=fsdp2) reads back: the trained parameters (frozen weights
        reload from the model files)."""
        return {name for name, param in self.named_parameters() if param.requires_grad}

    def prepare_save(self) -> None:
        """Called on every rank after the fit, before rank zero saves: what saving needs from every rank."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["num_tokens"] = self.num_tokens
        save_pairs_identity(self, checkpoint)
        keep_a_cut_epoch_unfinished(checkpoint)
        # automatic optimization, one optimizer: each optimizer step is one batch that stepped
        loop_state_as_lightning_restores_it(checkpoint, batches_stepped=checkpoint.get("global_step"))
        if is_sharded(self):  # trainer=fsdp2: the trained shards alone, as a resume reads them back
            keep = self.trained_state_keys()
            checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in keep}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        check_pairs_resume(self, checkpoint)
        self.restore_counters(checkpoint)

    def restore_counters(self, checkpoint: dict[str, Any]) -> None:
        """What the checkpoint holds besides the tensors and Lightning's loop state: the tokens trained on so far."""
        self.num_tokens = checkpoint.get("num_tokens", 0)


class PolicyPairModule(PairModule):
    """A PairModule that fine-tunes a policy (DPO, KTO, SFT): hparams.model is its spec (as the RL modules':
    name_or_path, lora, ...), optimizer_factory a partial of a torch optimizer over its trainable weights; with a
    reference_sync (DPO's and KTO's), the reference moves after each optimizer step as it says."""

    policy: torch.nn.Module  # set by the subclass's load_models (no class default: nn.Module registers it)
    reference_sync: Any = None
    shards = True
    saved_policy: torch.nn.Module | None = None  # set by prepare_save: the policy whose weights save_policy writes
    router_load: RouterLoad | None = None  # a MoE policy's load-balancing loss (algo.router_aux_loss_coef)

    def load_models(self) -> None:
        """Sets self.policy (and, where the loss reads one, self.reference and self.frozen_reference), the tokenizer."""
        raise NotImplementedError

    def configure_model(self) -> None:
        """The models loaded, then under trainer=fsdp2 sharded: the policy and a frozen reference copy."""
        if self.policy is not None:
            return
        self.load_models()
        self.router_load = router_load_of(self.policy, self.hparams.get("router_aux_loss_coef", 0.0))
        if fsdp2_strategy(self) is not None:
            frozen = getattr(self, "frozen_reference", None)
            shard_policy_models(self, [self.policy] + ([frozen] if frozen is not None else []))

    def load_policy_and_reference(self) -> tuple[torch.nn.Module, Reference]:
        """The policy as hparams.model says, and its reference (the policy with its adapters disabled, or a frozen
        copy); the tokenizer is set. Under trainer=fsdp2's sharded loading, built with placeholders that
        configure_model fills with each rank's shards."""
        spec = dict(self.hparams.model)
        self.tokenizer = load_model_tokenizer(spec)
        spec.pop("tokenizer_name_or_path", None)  # the policy's loader takes the rest
        return load_policy(tokenizer=self.tokenizer, empty=loads_sharded(self), **spec)

    def router_loss(self, batch_size: int, stage: str) -> torch.Tensor | None:
        """A MoE policy's algo.router_aux_loss_coef x its routers' load-balancing loss in the step's policy forward
        (the loss logged as aux_loss, TRL's name); None for a dense policy or a coefficient of 0."""
        aux = self.router_load.take() if self.router_load is not None else None
        if aux is None:
            return None
        self.log_metrics({("" if stage == "train" else "eval/") + "aux_loss": aux.detach()}, batch_size, stage)
        return self.hparams.router_aux_loss_coef * aux

    def with_router_loss(self, loss: torch.Tensor, batch_size: int, stage: str) -> torch.Tensor:
        """The step's loss plus router_loss: Lightning averages both over an accumulation window's micro-batches."""
        term = self.router_loss(batch_size, stage)
        return loss if term is None else loss + term

    @contextmanager
    def reference_model(self) -> Iterator[torch.nn.Module]:
        """The reference for no-grad forwards: the policy with its adapters disabled, or the frozen copy (sharded:
        its root resharded after the block, as it has no backward to do it)."""
        with self.reference.active() as reference, resharded_root(reference) if reference is not self.policy \
                else nullcontext(reference):
            yield reference

    def prepare_save(self) -> None:
        """Under trainer=fsdp2 the policy's shards gathered whole on rank zero (every rank takes part)."""
        # a plain attribute, not a submodule: it is no part of the module's state or checkpoints
        object.__setattr__(self, "saved_policy", policy_to_save(self))

    def configure_optimizers(self):
        return self.optimizer_factory([p for p in self.policy.parameters() if p.requires_grad])

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)
        if self.reference_sync is not None:
            # Lightning counts the step after this hook: global_step + 1 steps are done. Moved here, before the
            # callbacks' on_train_batch_end, so a checkpoint written at this step holds the moved reference.
            self.reference_sync.after_step(self, self.global_step + 1)

    def save_policy(self, directory: str | Path) -> Path:
        """The trained policy as a Hugging Face model folder (LoRA merged into a copy), with its tokenizer:
        `evaluate.py policy_path=<folder>` compares it with the model it started from, and `train.py
        model.name_or_path=<folder>` trains on from it."""
        policy = self.saved_policy if self.saved_policy is not None else self.policy
        # the gathered copy is this fit's own: LoRA merges into it in place
        return export_model(policy, self.tokenizer, directory, on_a_copy=policy is self.policy, key="save_dir",
                            into_existing=True)
