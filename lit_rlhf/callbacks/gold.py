"""The gold reward: a reward scored beside the trained (proxy) reward and never trained on, to measure
over-optimization (Gao, Schulman, Hilton 2022). GoldReward hands it to the module's Sampler, which scores it on every
draw:

    gold/score        the mean gold score of each RL step's completions (the proxy's is objective/scores)
    eval/gold_score   on the held-out prompts, at every validation (and at step 0)

and the end-of-run evaluation and evaluate.py compare it on the policy's and the reference's samples.

GoldCurve: with a gold reward, the run's over-optimization curve. Every RL step adds (d = sqrt(objective/kl),
gold/score, objective/scores); at the end of training it writes gold.json in the run directory: the points, the RL form
d (alpha - beta log d) fitted to the gold gain, the KL where the fitted curve peaks, the step and KL where the
observed gold score (a moving average over `window` steps) peaked, and whether the proxy kept rising after it. The
points are saved in checkpoints, so a resumed run's curve starts at the initial policy's gold score."""

from __future__ import annotations

import json
import math
from statistics import fmean
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

from lit_rlhf.callbacks.run_folder import run_folder
from lit_rlhf.callbacks.settings import check_count
from lit_rlhf.errors import writing
from lit_rlhf.statistics.gold import fit_rl_form


def moving_average(values: list[float], window: int) -> list[float]:
    return [fmean(values[max(0, i - window + 1): i + 1]) for i in range(len(values))]


class GoldReward(L.Callback):
    """`L.Trainer(callbacks=[GoldReward(VaderSentiment())])`: the gold reward scored beside the module's reward on
    every rollout (training, held-out, evaluation), never trained on: the weights trained are the same as without."""

    def __init__(self, reward: Any):
        self.reward = reward

    def setup(self, trainer: L.Trainer, module, stage: str) -> None:
        module.sampler.use_gold(self.reward)  # loaded with the module's models


class GoldCurve(L.Callback):
    def __init__(self, window: int = 10, filename: str = "gold.json", dirpath: str | None = None):
        check_count("gold_curve.window", window, 1, "(RL steps in the moving average)")
        self.window, self.filename, self.dirpath = window, filename, dirpath
        self.points: list[dict[str, float]] = []
        self.steps_without_kl = 0  # RL steps with a gold score but no objective/kl (a run with algo.kl_coef=0)

    def state_dict(self) -> dict:
        return {"points": [dict(point) for point in self.points]}

    def load_state_dict(self, state_dict: dict) -> None:
        self.points = [dict(point) for point in state_dict.get("points", [])]

    def on_train_batch_end(self, trainer: L.Trainer, module, *args) -> None:
        stats = getattr(module, "last_stats", None) or {}
        if "gold/score" in stats and "objective/kl" not in stats:
            self.steps_without_kl += 1
        if "gold/score" in stats and "objective/kl" in stats:  # the means over ranks
            self.points.append({"rl_step": module.rl_step, "sqrt_kl": math.sqrt(max(stats["objective/kl"], 0.0)),
                                "gold": stats["gold/score"], "proxy": stats["objective/scores"]})

    def report(self) -> dict | None:
        if not self.points:
            return None
        gold = moving_average([p["gold"] for p in self.points], self.window)
        proxy = moving_average([p["proxy"] for p in self.points], self.window)
        peak = max(range(len(gold)), key=gold.__getitem__)
        start = self.points[0]["gold"]  # the first rollout: the initial policy's samples
        fit = fit_rl_form([p["sqrt_kl"] for p in self.points], [p["gold"] - start for p in self.points])
        return {"points": self.points, "window": self.window, "fit": fit,
                "gold_peak": {"rl_step": self.points[peak]["rl_step"], "kl": self.points[peak]["sqrt_kl"] ** 2,
                              "gold_smoothed": gold[peak]},
                "proxy_rose_after_gold_peak": proxy[-1] - proxy[peak], "gold_fell_after_peak": gold[peak] - gold[-1]}

    def on_train_end(self, trainer: L.Trainer, module) -> None:
        report = self.report()
        if report is None and self.steps_without_kl and trainer.is_global_zero:
            rank_zero_info(f"No {self.filename}: the run logged gold/score but no objective/kl, the KL to the "
                           f"reference the gold curve is drawn against (a run with algo.kl_coef=0 computes none).")
        if report is None or not trainer.is_global_zero:
            return
        path = run_folder(trainer, self.dirpath) / self.filename
        path.parent.mkdir(parents=True, exist_ok=True)
        with writing(path):  # a full disk's line names the file
            path.write_text(json.dumps(report, indent=2) + "\n")
        peak, fit = report["gold_peak"], report["fit"]
        fitted = (f"; fitted d(alpha - beta log d) peaks at KL {fit['peak_kl']:.2f}" if fit and "peak_kl" in fit
                  else "; the fitted d(alpha - beta log d) still rises far past this KL"
                  if fit and fit.get("peak_beyond_range") else "")
        rank_zero_info(f"Gold score peaked at RL step {peak['rl_step']} (KL {peak['kl']:.2f}){fitted}; the proxy "
                       f"rose by {report['proxy_rose_after_gold_peak']:+.3f} after it: {path}")
