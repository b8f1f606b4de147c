"""Held-out evaluation of an RLHF module: validation_step, the step-0 point of the curves, and the
seeded sampling that validation, the evaluation and the sample callbacks share (HeldoutSampling, mixed into
RLHFModule)."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

import torch

from lit_rlhf.data.datamodule import PromptRow, batch_to
from lit_rlhf.rollout.trajectory import transcript
from lit_rlhf.tasks.metrics import SOURCE_COLUMN, rows_by_source


def heldout_metrics(module, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, tuple[torch.Tensor, int]]:
    """{eval/<name>: (its mean on one batch of held-out prompts, the completions it averages)}. The same seed at
    every validation gives comparable numbers and leaves the training RNG untouched."""
    samples = module.sample_heldout(batch, seed=batch_idx)
    metrics = {"eval/scores": torch.tensor(samples["mean_score"]), "eval/kl": torch.tensor(samples["mean_kl"]),
               "eval/rlhf_reward": samples["rlhf_reward"].mean().cpu()}
    if samples["gold"] is not None:  # never trained on: how the quality the proxy stands for moves
        metrics["eval/gold_score"] = samples["gold"].mean()
    columns, size = samples["columns"], len(samples["completions"])
    by_source, sources = rows_by_source(columns), heldout_sources(module)
    sized = {}
    for metric in module.task_metrics:  # e.g. eval/exact_match: accuracy against the dataset's answers
        correct = metric.correct(samples["completions"], **columns).float()  # N
        metrics[f"eval/{metric.name}"] = correct.mean()
        # e.g. eval/exact_match/arithmetic: one task of a mixed dataset. Every task of the held-out set is logged on
        # every batch, an absent one with weight 0, so that all ranks sync the same names.
        for source in sources:
            rows = by_source.get(source, [])
            sized[f"eval/{metric.name}/{source}"] = (correct[rows].mean() if rows else torch.tensor(0.0), len(rows))
    for name in ("tool_calls", "tool_errors", "turns"):  # multi-turn episodes: how the environment was used
        if name in columns:
            metrics[f"eval/{name}_mean"] = torch.tensor([float(v) for v in columns[name]]).mean()
    return {**{name: (value, size) for name, value in metrics.items()}, **sized}


def heldout_sources(module) -> list[str]:
    """The tasks the held-out prompts' `data_source` column names (the whole held-out set's, the same on every rank),
    or [] with one task or none."""
    prompts = getattr(getattr(module.trainer, "datamodule", None), "eval_prompts", None) or []
    columns = [row.columns for row in prompts if isinstance(row, PromptRow)]
    return sorted(rows_by_source({SOURCE_COLUMN: [c[SOURCE_COLUMN] for c in columns if SOURCE_COLUMN in c]}))


def log_heldout_before_training(module) -> dict[str, float] | None:
    """eval/* of the starting policy, logged at step 0 and returned (None where it is not measured: a resumed run,
    no validation): validation first runs after val_check_interval RL steps, and the curves would not show where
    the held-out score started."""
    trainer, datamodule = module.trainer, getattr(module.trainer, "datamodule", None)
    if module.rl_step or not trainer.limit_val_batches or datamodule is None:
        return None
    started = time.time()
    loader = datamodule.val_dataloader()
    limit = trainer.limit_val_batches
    num_batches = limit if isinstance(limit, int) else math.ceil(limit * len(loader))
    totals, counts = defaultdict(float), defaultdict(int)
    for batch_idx, batch in zip(range(num_batches), loader, strict=False):
        with module.ranks_stepping_together():  # every rank evaluates its share
            metrics = heldout_metrics(module, batch_to(batch, module.device), batch_idx)
        for name, (value, size) in metrics.items():
            totals[name] += float(value) * size
            counts[name] += size
    before = {}
    for name, total in totals.items():  # every rank's sums: a task absent from one rank's prompts weighs 0 there
        total, count = (trainer.strategy.reduce(torch.tensor(float(v), device=module.device), reduce_op="sum")
                        for v in (total, counts[name]))
        if count:
            before[name] = float(total / count)
    took = exclude_from_step_time(module, started)
    for logger in module.loggers:
        logger.log_metrics({**before, "time/validation_s": took}, step=0)
    return before


def exclude_from_step_time(module, started: float) -> float:
    """Seconds since `started`, taken out of the next RL step's time/step_s (which counts from the previous
    step's metrics): time/step_s is the step's own time, time/validation_s the validation's."""
    took = time.time() - started
    if getattr(module, "_last_step_logged", None) is not None:  # validate() without fit: no step to correct
        module._last_step_logged += took
    return took


class HeldoutSampling:
    def on_validation_epoch_start(self) -> None:
        self._validation_started = time.time()

    def on_validation_epoch_end(self) -> None:
        took = exclude_from_step_time(self, self._validation_started)
        # sync_dist: a no-op on one process, but Lightning warns without it wherever a process group exists (trainer=ddp
        # on one device too)
        self.log("time/validation_s", took, sync_dist=True)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        with self.ranks_stepping_together():  # every rank evaluates its share of the held-out prompts
            metrics = heldout_metrics(self, batch, batch_idx)
        for name, (value, size) in metrics.items():  # each weighted by its count
            self.log(name, value, batch_size=size, sync_dist=True)
        self.last_validated_rl_step = self.rl_step

    def sample_heldout(self, batch: dict[str, torch.Tensor], seed: int, greedy: bool = False,
                       samples_per_prompt: int = 1, from_reference: bool = False) -> dict[str, Any]:
        """K completions per prompt under a fixed seed, scored, without touching the training RNG.

        Sampling uses the training settings (pure sampling at the training temperature); greedy=True
        takes the argmax instead, for a low-variance view of what the policy prefers. With the same
        seed, from_reference=True draws the reference's completions with the same random stream.
        """
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(seed)
            rollout = self.rollout(batch, samples_per_prompt, for_training=False, from_reference=from_reference,
                                   greedy=greedy)
        penalty = self.kl_controller.penalty(rollout)
        per_sequence_kl = penalty.kl.sum(1)  # N
        # what reports show: the completion, or the whole conversation with the environment's turns marked
        transcripts = [transcript(c) for c in rollout.conversations] if rollout.conversations else rollout.completions
        return {"prompts": rollout.prompts, "completions": rollout.completions, "transcripts": transcripts,
                "conversations": rollout.conversations,
                "scores": rollout.raw_scores.tolist(), "kl": per_sequence_kl.tolist(),
                "mean_score": rollout.raw_scores.mean().item(), "mean_kl": per_sequence_kl.mean().item(),
                "rlhf_reward": rollout.scores + penalty.non_score_reward.sum(1),  # N  (missing-EOS penalty included)
                "contains_stop": rollout.contains_stop, "lengths": rollout.response_mask.sum(1),  # N
                "prompt_index": rollout.prompt_index, "columns": rollout.columns,  # N ; {name: N values}
                "gold": rollout.gold_scores}  # N, or None without a gold reward
