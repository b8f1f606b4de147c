"""Did RLHF help, and at what cost: the policy against its reference on the same prompts.

Both sides sample K completions per prompt with the same seed per batch and the training sampling
settings, and the same reward scores them. Shapes: B prompts, K samples per prompt, N = B*K.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from lit_rlhf.config.validation import check_bootstraps
from lit_rlhf.data.datamodule import batch_to
from lit_rlhf.errors import ConfigError
from lit_rlhf.evaluation.judges import PairwiseJudge, RewardJudge
from lit_rlhf.rewards.weighted_sum import named_parts
from lit_rlhf.statistics.estimates import bootstrap_mean_ci, distinct_n, per_prompt_mean
from lit_rlhf.tasks.metrics import per_prompt_majority, per_prompt_pass_at_k, rows_by_source

KL_ESTIMATOR_NAMES = {"k1": "k1: sum over response tokens of log p - log p_ref, on policy samples",
                      "k2": "k2: sum over response tokens of (log p - log p_ref)^2 / 2, on policy samples",
                      "k3": "k3: sum over response tokens of (r - 1) - log r, r = p_ref / p, on policy samples"}


@dataclass
class Evaluation:
    summary: dict[str, Any]  # the report: one number per entry, or a dict of them
    records: list[dict[str, Any]]  # one row per pair of completions

    def flat_metrics(self, prefix: str = "eval/") -> dict[str, float]:
        """The headline numbers as flat metric names (for loggers and sweep summaries)."""
        s = self.summary
        return {f"{prefix}score_diff": s["score_difference"]["mean"],
                f"{prefix}score_diff_ci_low": s["score_difference"]["ci_low"],
                f"{prefix}win_rate": s["win_rate"]["mean"], f"{prefix}kl_to_reference": s["policy"]["kl_mean"],
                f"{prefix}policy_score": s["policy"]["score_mean"],
                f"{prefix}reference_score": s["reference"]["score_mean"],
                f"{prefix}policy_distinct_2": s["policy"]["distinct_2"],
                **{f"{prefix}{name}_{stat}" if stat != "accuracy" else f"{prefix}{name}": value["mean"]
                   for name, sides in s.get("task_metrics", {}).items() for stat, value in sides["policy"].items()},
                **{f"{prefix}reference_{name}": sides["reference"]["accuracy"]["mean"]
                   for name, sides in s.get("task_metrics", {}).items()},
                **{f"{prefix}{name}/{source}": sides["policy"]["accuracy"]["mean"]
                   for source, metrics in s.get("task_metrics_by_source", {}).items()
                   for name, sides in metrics.items()},
                **({f"{prefix}gold_score_diff": s["gold"]["difference"]["mean"],
                    f"{prefix}policy_gold_score": s["gold"]["policy_score"],
                    f"{prefix}reference_gold_score": s["gold"]["reference_score"]} if "gold" in s else {})}


def side_summary(samples: dict[str, Any], scores: torch.Tensor) -> dict[str, float]:
    completions = samples["completions"]
    return {"score_mean": scores.mean().item(), "score_std": scores.std().item() if len(scores) > 1 else 0.0,
            "length_mean": samples["lengths"].float().mean().item(),
            "eos_rate": samples["contains_stop"].float().mean().item(),
            "distinct_1": distinct_n(completions, 1), "distinct_2": distinct_n(completions, 2)}


@torch.no_grad()
def compare_with_reference(module, batches: Iterable[dict[str, torch.Tensor]], samples_per_prompt: int = 4,
                           seed: int = 0, judge: PairwiseJudge | None = None, confidence: float = 0.95,
                           num_bootstraps: int = 1000) -> Evaluation:
    """Samples from module's policy and reference on every batch of prompts and compares them."""
    check_bootstraps("num_bootstraps", num_bootstraps, confidence)  # before minutes of sampling
    judge = judge or RewardJudge()
    sides = {"policy": [], "reference": []}
    offset = 0
    for batch_idx, batch in enumerate(batches):
        batch = batch_to(batch, module.device)
        for side in sides:
            out = module.sample_heldout(batch, seed + batch_idx, samples_per_prompt=samples_per_prompt,
                                        from_reference=side == "reference")
            out["prompt_index"] = out["prompt_index"] + offset  # N, numbered over all batches
            sides[side].append(out)
        offset += len(batch["input_ids"])
    if not sides["policy"]:
        raise ConfigError("there are no held-out prompts to evaluate on (data.num_eval_prompts=0 holds none out); "
                          "pass data.num_eval_prompts=16, or another number >= 1.")
    policy, reference = (merge(sides[side]) for side in ("policy", "reference"))
    policy_scores, reference_scores = torch.tensor(policy["scores"]), torch.tensor(reference["scores"])  # N
    judgments = torch.as_tensor(judge(policy["prompts"], policy["completions"], reference["completions"],
                                      policy_scores, reference_scores), dtype=torch.float32)  # N
    prompt_index = policy["prompt_index"].cpu()  # N
    difference = per_prompt_mean(policy_scores - reference_scores, prompt_index)  # B
    wins = per_prompt_mean(judgments, prompt_index)  # B
    kl_estimator = module.hparams.kl_estimator
    summary = {
        "num_prompts": offset, "samples_per_prompt": samples_per_prompt, "seed": seed,
        "judge": type(judge).__name__, "kl_estimator": KL_ESTIMATOR_NAMES[kl_estimator],
        "policy": {**side_summary(policy, policy_scores), "kl_mean": torch.tensor(policy["kl"]).mean().item()},
        "reference": side_summary(reference, reference_scores),
        "score_difference": interval(difference, confidence, num_bootstraps, seed),
        "win_rate": interval(wins, confidence, num_bootstraps, seed),
        "task_metrics": {metric.name: {side: task_summary(metric, samples, prompt_index, samples_per_prompt,
                                                          confidence, num_bootstraps, seed)
                                       for side, samples in (("policy", policy), ("reference", reference))}
                         for metric in getattr(module, "task_metrics", ())},
    }
    by_source = rows_by_source(policy["columns"])  # rows of a mixed dataset that name their task: each task apart
    if by_source:
        summary["task_metrics_by_source"] = {
            source: {metric.name: {side: task_summary(metric, subset(samples, rows), renumbered(prompt_index[rows]),
                                                      samples_per_prompt, confidence, num_bootstraps, seed)
                                   for side, samples in (("policy", policy), ("reference", reference))}
                     for metric in getattr(module, "task_metrics", ())}
            for source, rows in by_source.items()}
    gold = module.sampler.gold
    if gold is not None:  # the quality the trained reward stands for, never trained on (docs/preferences.md)
        policy_gold, reference_gold = policy["gold"], reference["gold"]  # N ; N
        summary["gold"] = gold_summary(gold, policy_gold, reference_gold, prompt_index, confidence, num_bootstraps,
                                       seed)
    if "tool_calls" in policy["columns"]:  # multi-turn episodes: how each side used the environment
        summary["episodes"] = {side: episode_summary(samples, prompt_index, confidence, num_bootstraps, seed)
                               for side, samples in (("policy", policy), ("reference", reference))}
    records = [{"prompt": policy["prompts"][i], "prompt_index": int(prompt_index[i]),
                "policy": policy["transcripts"][i], "policy_score": policy["scores"][i], "policy_kl": policy["kl"][i],
                "reference": reference["transcripts"][i], "reference_score": reference["scores"][i],
                "judgment": judgments[i].item()} for i in range(len(judgments))]
    if gold is not None:
        for record, policy_score, reference_score in zip(records, policy_gold.tolist(), reference_gold.tolist(),
                                                         strict=True):
            record.update(policy_gold=policy_score, reference_gold=reference_score)
    return Evaluation(summary, records)


def gold_summary(gold, policy_gold: torch.Tensor, reference_gold: torch.Tensor, prompt_index: torch.Tensor,
                 confidence: float, num_bootstraps: int, seed: int) -> dict[str, Any]:
    """Both sides' mean gold score (from their N gold scores) and the per-prompt difference with its interval."""
    return {"reward": "+".join(named_parts(gold)), "policy_score": policy_gold.mean().item(),
            "reference_score": reference_gold.mean().item(),
            "difference": interval(per_prompt_mean(policy_gold - reference_gold, prompt_index), confidence,
                                   num_bootstraps, seed)}


def episode_summary(samples: dict[str, Any], prompt_index: torch.Tensor, confidence: float, num_bootstraps: int,
                    seed: int) -> dict[str, Any]:
    """Episodes that called a tool (share, with its interval over prompts), tool errors and turns per episode."""
    calls = torch.tensor([float(v) for v in samples["columns"]["tool_calls"]])  # N
    return {"tool_call_rate": interval(per_prompt_mean((calls > 0).float(), prompt_index), confidence,
                                       num_bootstraps, seed),
            "tool_calls_mean": calls.mean().item(),
            "tool_errors_mean": torch.tensor([float(v) for v in samples["columns"]["tool_errors"]]).mean().item(),
            "turns_mean": torch.tensor([float(v) for v in samples["columns"]["turns"]]).mean().item()}


def interval(values: torch.Tensor, confidence: float, num_bootstraps: int, seed: int) -> dict[str, float]:
    low, high = bootstrap_mean_ci(values, confidence, num_bootstraps, seed)
    return {"mean": values.mean().item(), "ci_low": low, "ci_high": high, "confidence": confidence,
            "method": f"percentile bootstrap over prompts, {num_bootstraps} resamples"}


def merge(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """Concatenates the per-batch outputs of sample_heldout."""
    merged = {}
    for key, first in outputs[0].items():
        if isinstance(first, list):
            merged[key] = [x for out in outputs for x in out[key]]
        elif isinstance(first, torch.Tensor):
            merged[key] = torch.cat([out[key].cpu() for out in outputs])
        elif isinstance(first, dict):  # dataset columns: {name: values}
            merged[key] = {name: [x for out in outputs for x in out[key][name]] for name in first}
    return merged


def subset(samples: dict[str, Any], rows: list[int]) -> dict[str, Any]:
    """The completions and dataset columns of `rows` (indices into N) of one side's merged samples."""
    return {"completions": [samples["completions"][i] for i in rows],
            "columns": {name: [values[i] for i in rows] for name, values in samples["columns"].items()}}


def renumbered(prompt_index: torch.Tensor) -> torch.Tensor:
    """Prompt indices made 0..B'-1 in order, for a subset of the prompts."""
    return torch.unique(prompt_index, return_inverse=True)[1]


def task_summary(metric, samples: dict[str, Any], prompt_index: torch.Tensor, k: int, confidence: float,
                 num_bootstraps: int, seed: int) -> dict[str, dict[str, float]]:
    """Accuracy (pass@1), pass@k and majority@k of one side's K samples per prompt, each with its interval."""
    correct = metric.correct(samples["completions"], **samples["columns"]).float()  # N
    per_prompt = {"accuracy": per_prompt_mean(correct, prompt_index),
                  f"pass@{k}": per_prompt_pass_at_k(correct, prompt_index, k),
                  f"maj@{k}": per_prompt_majority(metric.answers(samples["completions"]), correct, prompt_index)}
    return {name: interval(values, confidence, num_bootstraps, seed) for name, values in per_prompt.items()}
