"""GenerationSamples: what the policy writes on the held-out prompts, during the run.

At the start of fit (not again when it resumes: samples.jsonl then keeps the rows of the steps the checkpoint holds
and drops those the resumed run draws again), every `every_n_steps` RL steps (default: num_sample_generations
times over the run, like TRL) and at the end, on rank zero: one completion per held-out prompt with the training
sampling settings (and greedy, if asked), scored, with its KL to the reference. Written to
<run dir>/samples.jsonl always; printed as a rich table; logged as a wandb Table or TensorBoard text. A
multi-turn episode shows as its conversation, the environment's turns marked `[env:...]` (and, in samples.jsonl,
also as `turns`: [{role: model | env, text}]).
"""

from __future__ import annotations

import json
import os
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from rich.table import Table

from lit_rlhf.callbacks.heldout import heldout_batch
from lit_rlhf.callbacks.interrupt import stop_requested
from lit_rlhf.callbacks.run_folder import run_folder
from lit_rlhf.callbacks.settings import check_count, check_flag
from lit_rlhf.errors import writing
from lit_rlhf.interrupts import CallAbandoned
from lit_rlhf.terminal import as_text, plain_console

COLUMNS = ["step", "stage", "mode", "query", "response", "score", "kl"]


class GenerationSamples(L.Callback):
    def __init__(self, num_samples: int = 8, num_sample_generations: int = 10, every_n_steps: int | None = None,
                 greedy: bool = False, seed: int = 0, dirpath: str | None = None, filename: str = "samples.jsonl",
                 print_to_console: bool = False, max_chars: int = 200):
        check_count("generation_samples.num_samples", num_samples, 1)
        check_count("generation_samples.max_chars", max_chars, 1)
        check_flag("generation_samples.greedy", greedy)
        check_flag("generation_samples.print_to_console", print_to_console)
        check_count("generation_samples.num_sample_generations", num_sample_generations, 0, "(0: none during training)")
        if every_n_steps is not None:
            check_count("generation_samples.every_n_steps", every_n_steps, 1,
                        "or null (num_sample_generations decides)")
        self.num_samples, self.num_sample_generations = num_samples, num_sample_generations
        self.every_n_steps = every_n_steps
        self.greedy, self.seed, self.dirpath, self.filename = greedy, seed, dirpath, filename
        self.print_to_console, self.max_chars = print_to_console, max_chars

    def path(self, trainer: L.Trainer) -> Path:
        return run_folder(trainer, self.dirpath) / self.filename

    def interval(self, trainer: L.Trainer, module) -> int:
        if self.every_n_steps:
            return self.every_n_steps
        total_rl_steps = module.total_rl_steps() or 0
        if not total_rl_steps or not self.num_sample_generations:  # 0: none during training, as in TRL
            return 0
        return max(1, total_rl_steps // self.num_sample_generations)

    def on_fit_start(self, trainer: L.Trainer, module) -> None:
        # a SIGTERM during the set-up: the run stops before training; a resumed run wrote its start samples already
        if trainer.is_global_zero:  # a resumed run's file: the rows it draws again go, and a row cut short
            drop_rows_after(self.path(trainer), module.rl_step)
        if module.rl_step == 0 and not stop_requested(trainer):
            self.generate(trainer, module, "start")

    def on_train_batch_end(self, trainer: L.Trainer, module, *args) -> None:
        every = self.interval(trainer, module)
        last_step = module.rl_step >= (module.total_rl_steps() or float("inf"))  # on_fit_end samples it
        if every and module.rl_step % every == 0 and not last_step and not stop_requested(trainer):
            self.generate(trainer, module, "train")  # (stopping: the checkpoint comes first)

    def on_fit_end(self, trainer: L.Trainer, module) -> None:
        self.generate(trainer, module, "end")

    def generate(self, trainer: L.Trainer, module, stage: str) -> list[dict[str, Any]]:
        if not (trainer.is_global_zero or module.rollout_engine.lockstep):  # trainer=fsdp2: every rank samples
            return []
        batch = heldout_batch(trainer, module, self.num_samples)
        if batch is None:
            return []
        try:
            rows = self.draw(module, batch, stage)
        except CallAbandoned:
            # SIGTERM while a reward (or teacher) of the samples waited: the samples are left out, and the run stops
            # after this step as for any SIGTERM during it (with several ranks rank zero may draw them alone: the
            # abandoned call's own stop would write the checkpoint while the other ranks wait elsewhere)
            return []
        if trainer.is_global_zero:
            self.write(trainer, rows)
        return rows

    def draw(self, module, batch: dict[str, Any], stage: str) -> list[dict[str, Any]]:
        rows = []
        for mode in ("sample", "greedy") if self.greedy else ("sample",):
            with module.ranks_stepping_together() if module.rollout_engine.lockstep else nullcontext():
                out = module.sample_heldout(batch, self.seed, greedy=mode == "greedy")
            for i, (query, response) in enumerate(zip(out["prompts"], out["transcripts"], strict=True)):
                rows.append({"step": module.rl_step, "stage": stage, "mode": mode, "query": query,
                             "response": response, "score": out["scores"][i], "kl": out["kl"][i]})
                if out["conversations"]:  # multi-turn: the turns apart too
                    rows[-1]["turns"] = [{"role": role, "text": text} for role, text in out["conversations"][i]]
        return rows

    def write(self, trainer: L.Trainer, rows: list[dict[str, Any]]) -> None:
        path = self.path(trainer)
        path.parent.mkdir(parents=True, exist_ok=True)
        with writing(path), open(path, "a") as f:  # a full disk's line names the file
            for row in rows:
                f.write(json.dumps(row) + "\n")
        step = rows[0]["step"]
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_table(key="samples", columns=COLUMNS, data=[[r[c] for c in COLUMNS] for r in rows])
            elif isinstance(logger, TensorBoardLogger):
                lines = ["| mode | query | response | score | kl |", "|---|---|---|---|---|"]
                lines += [f"| {r['mode']} | {r['query']} | {r['response']} | {r['score']:.3f} | {r['kl']:.3f} |"
                          for r in rows]
                logger.experiment.add_text("samples", "\n".join(lines), global_step=step)
        if self.print_to_console:
            table = Table(title=f"Samples at RL step {step} ({rows[0]['stage']})", show_lines=True)
            for column in ("mode", "query", "response", "score", "kl"):
                table.add_column(column)
            for r in rows:
                response = r["response"][: self.max_chars] + ("..." if len(r["response"]) > self.max_chars else "")
                table.add_row(r["mode"], as_text(r["query"]), as_text(response), f"{r['score']:.3f}", f"{r['kl']:.3f}")
            plain_console().print(table)


def drop_rows_after(path: Path, rl_step: int) -> None:
    """Drops from samples.jsonl the rows after RL step `rl_step`, which a run resumed from a checkpoint of that step
    draws again (an earlier checkpoint than the run's last samples: a crash, or ckpt_path naming an older one), and a
    last line without its line end, which a kill or a full disk cut short (the next row was appended to it, and lost
    with it). A line that is not one of this callback's rows stays, as does the order."""
    if not path.is_file():
        return
    lines = path.read_text(encoding="utf-8", errors="surrogateescape").splitlines(keepends=True)
    kept = [line for line in lines if not row_step(line) > rl_step and line.endswith(("\n", "\r"))]
    if len(kept) < len(lines):
        partial = path.with_name(f".{path.name}.partial")  # renamed over it whole: a kill never leaves half the file
        with writing(path):
            partial.write_text("".join(kept), encoding="utf-8", errors="surrogateescape")
        os.replace(partial, path)


def row_step(line: str) -> int | float:
    """The RL step of a samples.jsonl line, or -inf for one without a whole-number step."""
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError):
        return float("-inf")
    return step if isinstance(step, int) and not isinstance(step, bool) else float("-inf")
