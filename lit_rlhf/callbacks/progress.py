"""ProgressLines: RLStepsProgressBar's count (lit_rlhf.display) as plain lines, for logs."""

from __future__ import annotations

import sys
import time

import lightning as L

from lit_rlhf.callbacks.settings import check_count, check_flag


class ProgressLines(L.Callback):
    """A plain line every `every_n_steps` RL steps (and after the last): RL step, episodes, score, KL (a
    distillation's reverse KL), seconds per RL step and the time left, for logs (`make train > train.log`, cluster
    jobs, CI), where a progress bar draws nothing until the run ends. only_without_terminal (default): silent when
    stdout is a terminal, which has the bar. every_n_steps None: about 20 lines over the run."""

    def __init__(self, every_n_steps: int | None = None, only_without_terminal: bool = True):
        if every_n_steps is not None:
            check_count("progress_lines.every_n_steps", every_n_steps, 1, "or null")
        check_flag("progress_lines.only_without_terminal", only_without_terminal)
        self.every_n_steps, self.only_without_terminal = every_n_steps, only_without_terminal
        self._start = self._start_step = None

    def active(self, trainer: L.Trainer) -> bool:
        return trainer.is_global_zero and not (self.only_without_terminal and sys.stdout.isatty())

    def on_train_start(self, trainer: L.Trainer, module) -> None:
        self._start, self._start_step = time.perf_counter(), getattr(module, "rl_step", 0)

    def on_train_batch_end(self, trainer: L.Trainer, module, *args) -> None:
        if not self.active(trainer) or self._start is None:
            return
        step, total = module.rl_step, module.total_rl_steps()
        every = self.every_n_steps or max(1, (total or 200) // 20)
        if step % every and step != total:
            return
        per_step = (time.perf_counter() - self._start) / max(step - self._start_step, 1)
        stats = module.last_stats
        parts = [f"RL step {step}/{total or '?'}", f"episodes {int(stats.get('episode', module.episode))}",
                 f"score {stats.get('objective/scores', float('nan')):.3f}"]
        if "objective/kl" in stats:
            parts.append(f"kl {stats['objective/kl']:.3f}")
        if "distill/reverse_kl" in stats:
            parts.append(f"reverse_kl {stats['distill/reverse_kl']:.3f}")
        parts.append(f"{per_step:.2f} s/step")
        if total:
            parts.append(f"ETA {format_duration(per_step * (total - step))}")
        print(" | ".join(parts), flush=True)


def format_duration(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"
