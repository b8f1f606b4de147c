"""Checkpoints that hold what training changed (trained tensors, RL counters, random states), and
the exact resume that follows from them. Mixed into RLHFModule."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info

from lit_rlhf.checkpoints.files import tensors_digest
from lit_rlhf.checkpoints.loading import require_rl_checkpoint
from lit_rlhf.checkpoints.loop_state import keep_a_cut_epoch_unfinished, loop_state_as_lightning_restores_it
from lit_rlhf.checkpoints.resume_checks import check_resume, check_resumed_lr, check_resumed_reward
from lit_rlhf.checkpoints.run_identity import check_same_run, run_identity, typed_paths
from lit_rlhf.distributed.sharding import is_sharded
from lit_rlhf.errors import ConfigError
from lit_rlhf.interrupts import EndOfRunInterrupted
from lit_rlhf.models.policy import REFERENCE_ADAPTER


def numpy_rng_state() -> dict[str, Any]:
    """numpy's global RNG state in types that load with torch.load(weights_only=True)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": pos, "has_gauss": has_gauss,
            "cached": cached}


def set_numpy_rng_state(state: dict[str, Any]) -> None:
    np.random.set_state((state["kind"], state["keys"].numpy().astype(np.uint32), state["pos"], state["has_gauss"],
                         state["cached"]))


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": numpy_rng_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def every_ranks_rng_state(own: dict[str, Any]) -> list[dict[str, Any]] | None:
    """[rank 0's random states, rank 1's, ...] (`own`: this rank's) in a distributed run (gathered: every rank saves
    a checkpoint together), None in one process."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, own)
    return states


def set_rng_state(rng: dict[str, Any]) -> None:
    torch.set_rng_state(rng["torch"])
    set_numpy_rng_state(rng["numpy"])
    random.setstate(rng["python"])
    if rng.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])


def check_rng_state(rng: Any) -> None:
    """One line, at load time, for random states that cannot be restored; the current states are kept."""
    current = rng_state()
    try:
        set_rng_state(rng)
    except Exception as err:
        raise ConfigError(f"the checkpoint's random states (rlhf_state.rng) are malformed ({type(err).__name__}), so "
                          f"the run cannot resume exactly; use another checkpoint of the run.") from err
    finally:
        set_rng_state(current)


class TrainedStateCheckpoints:
    """Lightning checkpoint hooks for RLHFModule: frozen weights (base model, reference copy) reload from
    name_or_path; everything a run changed, and where it was, goes into the checkpoint."""

    def trained_state_keys(self) -> set[str]:
        """state_dict keys of the trained tensors (LoRA adapters, value head, or all of a full fine-tune), and the
        reference's (its frozen copy, or LoRA's reference adapter) when algo.sync_ref_model moves it. Frozen weights
        (base model, a fixed reference) reload from name_or_path instead."""
        trainable = {id(p) for p in getattr(self, "_trainable", None) or self.trainable_parameters()}
        moves = bool(self.hparams.get("sync_ref_model"))  # the frozen copy, or LoRA's reference adapter
        return {name for name, p in self.named_parameters() if id(p) in trainable
                or (moves and (name.startswith("frozen_reference.") or f".{REFERENCE_ADAPTER}." in name))}

    def record_run_config(self, groups: dict[str, Any]) -> None:
        """The app's reward, gold, task_metrics and env configs (passwords masked): saved in checkpoints, so that
        evaluate.py ckpt_path=... scores with what the run trained on."""
        self.run_config = groups

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self._step_start = (self.rl_step, rng_state())

    def checkpointed_rng_state(self) -> dict[str, Any]:
        """The random states a checkpoint records: now, or, written before the RL step in progress ended (a call
        abandoned on SIGTERM), those the step began with, so that the step, run again on resume, draws what it drew
        the first time."""
        started = getattr(self, "_step_start", None)
        return started[1] if started is not None and started[0] == self.rl_step else rng_state()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        rng = self.checkpointed_rng_state()
        loop_state_as_lightning_restores_it(checkpoint)
        # a run's last step inside Lightning's epoch: resumed for more steps, it goes on in that epoch (after the
        # rewrite above, which would read the epoch going on as a stop after the batch's evaluation)
        keep_a_cut_epoch_unfinished(checkpoint)
        keep = self.trained_state_keys()
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in keep}
        checkpoint["rlhf_state"] = {
            "algo": f"{type(self).__module__}.{type(self).__qualname__}",
            "episode": self.episode, "num_tokens": self.num_tokens, "rl_step": self.rl_step,
            "kl_controller": self.kl_controller.state_dict(),
            "score_transforms": [getattr(t, "state_dict", dict)() for t in self.score_transforms],
            "skipped_updates": self.nonfinite.skipped_updates,
            "draw_seed": self.rollout_queue.draw_seed,  # async mode at S >= 1
            # a corrupted file is refused on load (sharded checkpoints: shards of DTensors, not digested)
            "trained_digest": None if is_sharded(self) else tensors_digest(checkpoint["state_dict"]),
            "identity": self.identity_of_run(),  # compared on resume (run_identity.py)
            # the CLI's reward and task_metrics configs, which evaluate.py ckpt_path=... uses (plain values)
            "run_config": self.run_config,
            "rng": rng,
            # every rank's own: ranks draw different amounts (their responses stop at different lengths), so rank
            # zero's states restored on every rank would sample something else than the uninterrupted run
            "rng_per_rank": every_ranks_rng_state(rng),
        }

    def identity_of_run(self) -> dict[str, Any]:
        """The run's identity (algorithm, rewards, digests of the files it read), computed once per fit."""
        if getattr(self, "_run_identity", None) is None:
            datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
            dataset = getattr(datamodule, "hparams", {}).get("dataset") if datamodule is not None else None
            self._run_identity = run_identity(self, dataset)
        return self._run_identity

    def apply_resume_changes(self, checkpoint: dict[str, Any]) -> None:
        """On a resume under a Trainer: refuse setting changes that break exactness, apply the others
        (the new lr once the optimizer state is restored, see on_train_start) and say which in one line."""
        if self._trainer is None or "optimizer_states" not in checkpoint:
            return  # loading weights (evaluate, export), not resuming
        require_rl_checkpoint(checkpoint, f"ckpt_path={self.trainer.ckpt_path}")  # not a preference run's
        datamodule = getattr(self.trainer, "datamodule", None)
        check_same_run(checkpoint.get("rlhf_state", {}).get("identity"), self.identity_of_run(), typed=(
            typed_paths(checkpoint.get("hyper_parameters"), checkpoint.get("datamodule_hyper_parameters")),
            typed_paths(self.hparams, datamodule.hparams if datamodule is not None else None)))
        saved_groups = checkpoint.get("rlhf_state", {}).get("run_config") or {}
        check_resumed_reward(saved_groups.get("reward"), (self.run_config or {}).get("reward"))
        applied = check_resume(checkpoint.get("hyper_parameters", {}), dict(self.hparams),
                               checkpoint.get("datamodule_hyper_parameters"),
                               dict(datamodule.hparams) if datamodule is not None else None)
        new_lr = (getattr(self.optimizer_factory, "keywords", None) or {}).get("lr")
        lr_change = check_resumed_lr(checkpoint["optimizer_states"], new_lr, self.lr_scheduler_factory is not None)
        self._lr_to_apply = new_lr if lr_change else None
        applied += [lr_change] if lr_change else []
        if applied:
            rank_zero_info(f"Resume applies: {'; '.join(applied)}.")

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.apply_resume_changes(checkpoint)
        digest = checkpoint.get("rlhf_state", {}).get("trained_digest")
        if digest is not None and digest != tensors_digest(checkpoint["state_dict"]):
            raise ConfigError("the checkpoint's trained tensors do not match the digest written with them (the file "
                              "is corrupted); use another checkpoint of the run.")
        missing = self.trained_state_keys() - set(checkpoint["state_dict"])
        unknown = set(checkpoint["state_dict"]) - set(self.state_dict())
        if missing or unknown:
            raise ConfigError(f"checkpoint does not fit this model: {len(missing)} trained tensors missing "
                              f"(e.g. {sorted(missing)[:2]}), {len(unknown)} unknown (e.g. {sorted(unknown)[:2]}); "
                              f"resume with the model and algo settings of the run that wrote it.")
        state = checkpoint.get("rlhf_state", {})
        self.episode, self.num_tokens = state.get("episode", 0), state.get("num_tokens", 0)
        self.rl_step = state.get("rl_step", 0)
        if self.run_config is None and (self._trainer is None or "optimizer_states" not in checkpoint):
            self.run_config = state.get("run_config")  # loaded to export or evaluate: the model card names the reward
        if "kl_controller" in state:
            self.kl_controller.load_state_dict(state["kl_controller"])
        for transform, transform_state in zip(self.score_transforms, state.get("score_transforms", []), strict=False):
            if hasattr(transform, "load_state_dict"):
                transform.load_state_dict(transform_state)
        self.nonfinite.skipped_updates = state.get("skipped_updates", 0)
        draw_seed = state.get("draw_seed")
        if draw_seed is not None and (isinstance(draw_seed, bool) or not isinstance(draw_seed, int)):
            raise ConfigError(f"the checkpoint's rlhf_state.draw_seed is {type(draw_seed).__name__}, not a whole "
                              f"number (the file is corrupted); use another checkpoint of the run.")
        self.rollout_queue.draw_seed = draw_seed
        per_rank = state.get("rng_per_rank")
        world_size = self.trainer.world_size if self._trainer is not None else 1
        rank = self.trainer.global_rank if self._trainer is not None else 0
        own = per_rank[rank] if isinstance(per_rank, list) and len(per_rank) == world_size else None
        self._rng_to_restore = own or state.get("rng")
        if self._rng_to_restore:
            check_rng_state(self._rng_to_restore)

    def on_train_end(self) -> None:
        self.training_finished = True  # callbacks' on_train_end (the final checkpoint) ran before this hook
        if self.trainer.received_sigterm:  # during the last step, which Lightning lets finish without stopping
            raise EndOfRunInterrupted("SIGTERM")

    def on_train_start(self) -> None:
        """Random states of the interrupted run, restored as late as possible: nothing between here and
        the next training step may draw from them, so a resumed run samples what the original did."""
        lr, self._lr_to_apply = getattr(self, "_lr_to_apply", None), None
        if lr is not None:  # a changed lr on resume, over the one the restored optimizer state holds
            for group in self.optimizers().param_groups:
                group["lr"] = lr
        rng, self._rng_to_restore, self._step_start = getattr(self, "_rng_to_restore", None), None, None
        if rng:
            set_rng_state(rng)
