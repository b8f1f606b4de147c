"""TrainingSummary: what changed, shown at the end of fit.

On the held-out prompts, with the same sampling seed before and after training (so the two columns
differ only by the policy): mean score, mean KL to the reference, and a table of completions.
It also reports the training metrics of the first and last RL steps. Both "before" and the first step are the
run's own when it resumes from a checkpoint (saved in it), not the checkpoint's policy.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_only
from rich.table import Table

from lit_rlhf.callbacks.heldout import heldout_batch
from lit_rlhf.callbacks.interrupt import stop_requested
from lit_rlhf.callbacks.settings import check_count
from lit_rlhf.terminal import as_text, plain_console

TRACKED = ("objective/scores", "objective/kl", "objective/rlhf_reward", "objective/entropy")
SHOWN = ("prompts", "transcripts", "scores", "mean_score", "mean_kl")  # of a held-out sample, what print() shows


class TrainingSummary(L.Callback):
    def __init__(self, num_samples: int = 6, seed: int = 0, max_chars: int = 160):
        check_count("training_summary.num_samples", num_samples, 0, "(0: no table of completions)")
        check_count("training_summary.max_chars", max_chars, 1)
        self.num_samples, self.seed, self.max_chars = num_samples, seed, max_chars
        self.before: dict[str, Any] | None = None
        self.after: dict[str, Any] | None = None
        self.first_step: dict[str, float] = {}
        self.last_step: dict[str, float] = {}

    def sample(self, trainer: L.Trainer, module) -> dict[str, Any] | None:
        batch = heldout_batch(trainer, module)
        if batch is None:
            return None
        with module.ranks_stepping_together():  # every rank samples
            return module.sample_heldout(batch, self.seed)

    def setup(self, trainer: L.Trainer, module, stage: str) -> None:
        if stage == TrainerFn.FITTING:  # a resume restores them next
            self.before, self.after, self.first_step, self.last_step = None, None, {}, {}

    def on_fit_start(self, trainer: L.Trainer, module) -> None:
        # a SIGTERM during the set-up: the run stops before training; a resumed run has the run's own
        if self.before is None and not stop_requested(trainer):
            before = self.sample(trainer, module)
            self.before = None if before is None else {key: before[key] for key in SHOWN}

    def on_train_batch_end(self, trainer: L.Trainer, module, *args) -> None:
        stats = {k: v for k, v in module.last_stats.items() if k in TRACKED}
        if not self.first_step:
            self.first_step = stats
        self.last_step = stats

    def on_fit_end(self, trainer: L.Trainer, module) -> None:
        self.after = self.sample(trainer, module)
        self.print()

    def state_dict(self) -> dict[str, Any]:
        # last_step too: a resume that trains nothing more (steps= reached) shows the run's last step, not nan
        return {"first_step": self.first_step, "last_step": self.last_step, "before": self.before}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.first_step, self.last_step = (numbers_of(state.get(key)) for key in ("first_step", "last_step"))
        before = state.get("before")
        self.before = before if shown_sample(before) else None  # else sampled again

    @rank_zero_only
    def print(self) -> None:
        console = plain_console()
        if self.first_step:
            steps = Table(title="Training metrics: first vs last RL step")
            for column in ("metric", "first", "last"):
                steps.add_column(column)
            for key in TRACKED:
                steps.add_row(key, f"{self.first_step.get(key, float('nan')):.3f}",
                              f"{self.last_step.get(key, float('nan')):.3f}")
            console.print(steps)
        if self.before is None or self.after is None:
            return
        console.print(f"Held-out prompts (same sampling seed): mean score {self.before['mean_score']:.3f} -> "
                      f"{self.after['mean_score']:.3f}, mean KL to reference {self.before['mean_kl']:.3f} -> "
                      f"{self.after['mean_kl']:.3f}")
        samples = Table(title="Sample completions before and after training", show_lines=True)
        for column, style in (("prompt", "bold"), ("before", None), ("score", None), ("after", None), ("score", None)):
            samples.add_column(column, style=style)
        for i in range(min(self.num_samples, len(self.before["prompts"]))):
            samples.add_row(as_text(self.before["prompts"][i]), as_text(self._cut(self.before["transcripts"][i])),
                            f"{self.before['scores'][i]:.2f}", as_text(self._cut(self.after["transcripts"][i])),
                            f"{self.after['scores'][i]:.2f}")
        console.print(samples)

    def _cut(self, text: str) -> str:
        return text if len(text) <= self.max_chars else text[: self.max_chars] + "..."


def numbers_of(stats: Any) -> dict[str, float]:
    """A checkpoint's step statistics, those the table prints as numbers (a checkpoint is untrusted input)."""
    if not isinstance(stats, dict):
        return {}
    return {k: float(v) for k, v in stats.items() if k in TRACKED and isinstance(v, (int, float))
            and not isinstance(v, bool)}


def shown_sample(sample: Any) -> bool:
    """Whether a checkpoint's "before" sample holds what print() shows, in the types it shows them as (a checkpoint is
    untrusted input: its text is printed through as_text)."""
    if not isinstance(sample, dict) or not set(SHOWN) <= set(sample):
        return False
    prompts, transcripts, scores = sample["prompts"], sample["transcripts"], sample["scores"]
    if not all(isinstance(values, list) for values in (prompts, transcripts, scores)):
        return False
    numbers = [*scores, sample["mean_score"], sample["mean_kl"]]
    return (all(isinstance(text, str) for text in prompts + transcripts)
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in numbers))
