"""The statistics an RL step logs (names after TRL's RLOO/PPO trainers and its logging page) and the per-sequence
values its histograms show. Mixed into RLHFModule.

Shapes: N sequences, R response length.
"""

from __future__ import annotations

import time

import torch

from lit_rlhf.ops import sampler_mismatch_stats
from lit_rlhf.rollout.trajectory import episode_stats
from lit_rlhf.statistics.rollout import completion_stats, group_stats, host_values, mean_over_ranks, reward_stats
from lit_rlhf.step.rollout import Rollout


def objective_stats(rollout: Rollout, kl: torch.Tensor | None, non_score_reward: torch.Tensor,
                    rlhf_reward: torch.Tensor) -> dict[str, torch.Tensor]:
    """The objective/* metrics, named as in TRL's RLOO and PPO trainers (no objective/kl without a KL)."""
    return {
        **({} if kl is None else {"objective/kl": kl.sum(1).mean()}),
        "objective/entropy": (-rollout.logprobs * rollout.response_mask).sum(1).mean(),
        "objective/non_score_reward": non_score_reward.sum(1).mean(),
        "objective/rlhf_reward": rlhf_reward.mean(),
        "objective/scores": rollout.raw_scores.mean(),
    }


def sampler_stats(rollout: Rollout, hparams) -> dict[str, torch.Tensor]:
    """rollout/*: how far the engine's logprobs of the sampled tokens are from the trainer's (under
    async_correction=behaviour too, where the sampler's are the old logprobs: the lag); nothing when the engine
    reports none, as `rollout=hf`, whose sampler is the trainer's own model."""
    if rollout.sampler_logprobs is None:
        return {}
    trainer = rollout.logprobs if rollout.trainer_logprobs is None else rollout.trainer_logprobs  # N,R
    return sampler_mismatch_stats(trainer, rollout.sampler_logprobs, rollout.response_mask, hparams.rollout_is_cap,
                                  hparams.rollout_is_mode, hparams.rollout_is_min)


@torch.no_grad()
def step_distributions(rollout: Rollout, advantages: torch.Tensor, kl: torch.Tensor | None,
                       ratios: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-sequence and per-token values for histograms (names after TRL's PPO logging page); kl: the per-token KL
    (N,R) or None, ratios: the update's probability ratios on loss tokens."""
    mask = rollout.response_mask
    return {
        "env/reward_dist": rollout.raw_scores, "objective/kl_dist": None if kl is None else kl.sum(1),
        "objective/logprobs": rollout.logprobs[mask],
        "objective/ref_logprobs": None if kl is None else rollout.ref_logprobs[mask],
        "policy/advantages": advantages[mask], "policy/ratio": torch.cat(ratios) if ratios else None,
        "tokens/responses_len_dist": mask.sum(1).float(),
    }


class StepStatistics:
    def rank_mean(self, value: torch.Tensor) -> float:
        """A scalar's mean over the ranks, read on the host."""
        if self._trainer is not None and self.trainer.world_size > 1:
            value = self.trainer.strategy.reduce(value.detach().to(torch.float64), reduce_op="mean")
        return float(value)

    def log_stats(self, rollout: Rollout, stats: dict[str, torch.Tensor]) -> None:
        self.last_step_episodes = len(rollout) * self.trainer.world_size
        self.last_step_prompts = rollout.prompts  # N  what this rank trained on (repeated K times)
        self.episode += self.last_step_episodes
        # TRL's num_tokens: the prompt and model tokens of every rank's rollouts so far; each rank adds its own count
        # times the ranks, so that the mean over the ranks below is the running total
        ranks = self.trainer.world_size
        step_tokens = (rollout.query_mask.sum() + rollout.response_mask.sum()).to(torch.float64) * ranks
        now = time.time()
        elapsed, step_s = max(now - self._fit_start_time, 1e-9), now - self._last_step_logged
        self._last_step_logged = now
        stats = {
            **stats,
            **completion_stats(rollout.response_mask, rollout.contains_stop, rollout.completions),
            **reward_stats(rollout.reward_components),
            **episode_stats(rollout.columns, rollout.response_mask, rollout.context_mask),
            **group_stats(rollout.scores, rollout.prompt_index),
            **sampler_stats(rollout, self.hparams),
            **{key: torch.tensor(value) for key, value in self.rollout_engine.stats().items()},
            **{key: torch.tensor(value) for key, value in self.step_timings.items()},
            **self.rollout_queue.stats(rollout.policy_version, self.rl_step),
            **({} if rollout.gold_scores is None else {"gold/score": rollout.gold_scores.mean()}),
            "time/step_s": torch.tensor(step_s),  # since the previous step's metrics (a validation between counts)
            "val/num_eos_tokens": rollout.contains_stop.sum().float(),
            "objective/kl_coef": torch.tensor(self.kl_coef),
            "policy/skipped_updates": torch.tensor(float(self.nonfinite.skipped_updates)),
            "lr": torch.tensor(self.optimizers().param_groups[0]["lr"]),
            "episode": torch.tensor(float(self.episode)),
            "num_tokens": self.num_tokens + step_tokens,
            "eps": torch.tensor((self.episode - self._episode_at_start) / elapsed),
        }
        self.step_timings.clear()
        if self.trainer.world_size > 1:  # the mean over ranks, in one collective: what every report shows
            stats = mean_over_ranks(stats, self.trainer.strategy, self.device)
        self.last_stats = host_values(stats, self.device)
        self.num_tokens = round(self.last_stats["num_tokens"])  # exact: float64 sums of whole numbers
        self.log_dict({k: v.float() for k, v in stats.items()}, on_step=True, on_epoch=False, batch_size=len(rollout))
        # the score, and what the run steers on beside it: the KL to the reference, a distillation's reverse KL
        shown = {"kl": "objective/kl", "reverse_kl": "distill/reverse_kl"}
        bar = {"score": stats["objective/scores"], **{name: stats[key] for name, key in shown.items() if key in stats}}
        self.log_dict(bar, prog_bar=True,
                      logger=False, on_step=True, on_epoch=False, batch_size=len(rollout))
