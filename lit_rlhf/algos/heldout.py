"""Held-out evaluation of an RLHF module: validation_step, the step-0 point of the curves, and the
seeded sampling that validation, the evaluation and the sample callbacks share (HeldoutSampling, mixed into
RLHFModule)."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

import torch

from lit_rlhf.data.datamodule import batch_to
from lit_rlhf.rollout.trajectory import transcript


def heldout_metrics(module, batch: dict[str, torch.Tensor], batch_idx: int) -> tuple[dict[str, torch.Tensor], int]:
    """eval/* on one batch of held-out prompts, and its size. The same seed at every validation gives
    comparable numbers and leaves the training RNG untouched."""
    samples = module.sample_heldout(batch, seed=batch_idx)
    metrics = {"eval/scores": torch.tensor(samples["mean_score"]), "eval/kl": torch.tensor(samples["mean_kl"]),
               "eval/rlhf_reward": samples["rlhf_reward"].mean().cpu()}
    if samples["gold"] is not None:  # never trained on: how the quality the proxy stands for moves
        metrics["eval/gold_score"] = samples["gold"].mean()
    for metric in module.task_metrics:  # e.g. eval/exact_match: accuracy against the dataset's answers
        metrics[f"eval/{metric.name}"] = metric.correct(samples["completions"], **samples["columns"]).float().mean()
    columns = samples["columns"]
    for name in ("tool_calls", "tool_errors", "turns"):  # multi-turn episodes: how the environment was used
        if name in columns:
            metrics[f"eval/{name}_mean"] = torch.tensor([float(v) for v in columns[name]]).mean()
    return metrics, len(samples["prompts"])


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
    totals, count = defaultdict(float), 0
    for batch_idx, batch in zip(range(num_batches), loader, strict=False):
        metrics, size = heldout_metrics(module, batch_to(batch, module.device), batch_idx)
        for name, value in metrics.items():
            totals[name] += float(value) * size
        count += size
    reduced = {k: trainer.strategy.reduce(torch.tensor(v / count, device=module.device), reduce_op="mean")
               for k, v in totals.items()}
    before = {k: float(v) for k, v in reduced.items()}
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
        self.log("time/validation_s", took, sync_dist=self.trainer.world_size > 1)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        metrics, size = heldout_metrics(self, batch, batch_idx)
        self.log_dict(metrics, batch_size=size, sync_dist=self.trainer.world_size > 1)
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
