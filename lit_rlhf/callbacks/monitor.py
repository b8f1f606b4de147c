"""RewardHackingMonitor: warns when training looks like reward hacking, and logs monitor/* (1 while a sign
holds, else 0). The signs, each from metrics the module already logs:

    monitor/reward_up_metric_down   a task metric (eval/<name>), or the gold score (gold/score, a moving average over
                                    `window` steps), fell from its best while the training score rose
    monitor/length_jump             completions/mean_length left [1/length_ratio, length_ratio] x its start
    monitor/missing_stop_jump       completions/clipped_ratio rose more than missing_stop_rise above its start
    monitor/distinct_collapse       completions/distinct_2 fell below distinct_ratio x its start
    monitor/kl_over_budget          objective/kl, averaged over the last `window` steps, above kl_budget (the
                                    training FAQ's 10; one step's estimate is too noisy to judge: a healthy run's
                                    steps reach 10 now and then while its mean stays near 1)
    monitor/tool_errors_jump        multi-turn: rollout/tool_error_rate (per call) rose more than tool_error_rise
    monitor/truncated_jump          multi-turn: rollout/truncated_frac rose more than missing_stop_rise (episodes
                                    looping on tools until a limit ends them)

"Start" is the mean of the first `window` RL steps, "now" the mean of the last `window`. HackingSigns holds the
logic, without Lightning, so it can be fed any metric stream.
"""

from __future__ import annotations

from collections import deque
from statistics import fmean

import lightning as L
from lightning.pytorch.utilities import rank_zero_warn

from lit_rlhf.callbacks.settings import check_count, check_flag, check_threshold

CHANGES = {"length_jump": ("completions/mean_length", "mean completion length"),
           "missing_stop_jump": ("completions/clipped_ratio", "share of completions without the stop token"),
           "distinct_collapse": ("completions/distinct_2", "distinct-2 of completions"),
           "tool_errors_jump": ("rollout/tool_error_rate", "tool errors per call"),
           "truncated_jump": ("rollout/truncated_frac", "share of episodes ended by a limit")}
SIGNS = ("reward_up_metric_down", "length_jump", "missing_stop_jump", "distinct_collapse", "kl_over_budget",
         "tool_errors_jump", "truncated_jump")
RISES = {"missing_stop_jump": "missing_stop_rise", "tool_errors_jump": "tool_error_rise",
         "truncated_jump": "missing_stop_rise"}  # sign: the threshold its metric may rise by


class HackingSigns:
    def __init__(self, window: int = 10, kl_budget: float | None = 10.0, length_ratio: float = 2.0,
                 missing_stop_rise: float = 0.2, distinct_ratio: float | None = 0.6, metric_drop: float = 0.05,
                 score_rise: float = 0.05, tool_error_rise: float = 0.2):
        check_count("reward_hacking_monitor.window", window, 1, "(RL steps averaged at the start and now)")
        key = "reward_hacking_monitor."
        check_threshold(f"{key}length_ratio", length_ratio, 1, strictly=True, note="(a change of mean length by this "
                        "factor, up or down, is a sign)")
        check_threshold(f"{key}kl_budget", kl_budget, 0, optional=True, note="(top-level kl_budget sets it)")
        check_threshold(f"{key}distinct_ratio", distinct_ratio, 0, strictly=True, optional=True,
                        note="(a fall of distinct-2 below this share of its start is a sign)")
        for name, value in (("missing_stop_rise", missing_stop_rise), ("tool_error_rise", tool_error_rise),
                            ("metric_drop", metric_drop), ("score_rise", score_rise)):
            check_threshold(f"{key}{name}", value, 0)
        self.window, self.kl_budget, self.length_ratio = window, kl_budget, length_ratio
        self.missing_stop_rise, self.distinct_ratio = missing_stop_rise, distinct_ratio
        self.metric_drop, self.score_rise, self.tool_error_rise = metric_drop, score_rise, tool_error_rise
        self.start: dict[str, list[float]] = {}
        self.recent: dict[str, deque] = {}
        self.best_metric: dict[str, tuple[float, float]] = {}  # name: (best value, mean training score then)
        self.metric_signs: dict[str, bool] = {}

    def _mean(self, key: str, which: str) -> float | None:
        values = self.start.get(key) if which == "start" else self.recent.get(key)
        return fmean(values) if values and len(values) >= self.window else None

    def update(self, stats: dict[str, float]) -> dict[str, bool]:
        """One RL step's metrics -> {sign: holds}."""
        for key, value in stats.items():
            start = self.start.setdefault(key, [])
            if len(start) < self.window:
                start.append(value)
            self.recent.setdefault(key, deque(maxlen=self.window)).append(value)
        signs = dict.fromkeys(SIGNS, False)
        length, length0 = self._mean("completions/mean_length", "now"), self._mean("completions/mean_length", "start")
        if length is not None and length0:
            signs["length_jump"] = not (1 / self.length_ratio <= length / length0 <= self.length_ratio)
        for sign, threshold in RISES.items():
            now, start = (self._mean(CHANGES[sign][0], w) for w in ("now", "start"))
            if now is not None and start is not None:
                signs[sign] = now - start > getattr(self, threshold)
        distinct, distinct0 = (self._mean("completions/distinct_2", w) for w in ("now", "start"))
        if distinct is not None and distinct0 and self.distinct_ratio is not None:  # null: not watched
            signs["distinct_collapse"] = distinct < self.distinct_ratio * distinct0
        kl = self._mean("objective/kl", "now")
        if self.kl_budget is not None and kl is not None:
            signs["kl_over_budget"] = kl > self.kl_budget
        signs["reward_up_metric_down"] = any(self.metric_signs.values())
        return signs

    def update_task_metrics(self, metrics: dict[str, float]) -> None:
        """A validation's task metrics (eval/<name>): compared with their best value so far."""
        score = fmean(self.recent["objective/scores"]) if self.recent.get("objective/scores") else None
        for name, value in metrics.items():
            best, score_then = self.best_metric.get(name, (value, score))
            fell = value < best - self.metric_drop
            rose = score is not None and score_then is not None and score > score_then + self.score_rise
            self.metric_signs[name] = fell and rose
            if value >= best or name not in self.best_metric:
                self.best_metric[name] = (value, score)


class RewardHackingMonitor(L.Callback):
    """Logs monitor/<sign> every RL step and warns once per sign (on rank zero) with what it saw."""

    def __init__(self, enabled: bool = True, **thresholds):
        check_flag("reward_hacking_monitor.enabled", enabled)
        self.enabled = enabled
        self.signs = HackingSigns(**thresholds)
        self.warned: dict[str, int] = {}  # sign: the RL step of its first warning

    def on_train_batch_end(self, trainer: L.Trainer, module, *args) -> None:
        if not self.enabled or not module.last_stats:
            return
        signs = self.signs.update(module.last_stats)
        recent_gold = self.signs.recent.get("gold/score")
        if recent_gold is not None and len(recent_gold) >= self.signs.window:  # a gold reward: watched as a metric
            self.signs.update_task_metrics({"gold/score": fmean(recent_gold)})
        module.log_dict({f"monitor/{name}": float(holds) for name, holds in signs.items()}, on_step=True,
                        on_epoch=False, batch_size=1)
        for name, holds in signs.items():
            if holds and name not in self.warned:
                self.warned[name] = module.rl_step
                rank_zero_warn(f"possible reward hacking at RL step {module.rl_step}: {self.describe(name)}. Check "
                               f"the samples (samples.jsonl); docs/tasks.md explains the signs.")

    def on_validation_end(self, trainer: L.Trainer, module) -> None:
        names = [f"eval/{metric.name}" for metric in getattr(module, "task_metrics", ())]
        metrics = {n: float(trainer.callback_metrics[n]) for n in names if n in trainer.callback_metrics}
        if self.enabled and metrics:
            self.signs.update_task_metrics(metrics)

    def describe(self, name: str) -> str:
        s = self.signs
        if name == "reward_up_metric_down":
            fallen = [m for m, holds in s.metric_signs.items() if holds]
            return f"the training score rose while {', '.join(fallen)} fell from its best"
        if name in CHANGES:
            key, label = CHANGES[name]
            return f"{label} {s._mean(key, 'start'):.2f} -> {s._mean(key, 'now'):.2f}"
        return (f"objective/kl {s._mean('objective/kl', 'now'):.1f} over the last {s.window} RL steps is above the "
                f"KL budget {s.kl_budget}")

    def state_dict(self) -> dict:
        return {"warned": dict(self.warned)}

    def load_state_dict(self, state: dict) -> None:
        self.warned = dict(state.get("warned", {}))
