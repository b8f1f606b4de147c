"""The two display callbacks an RLHF run replaces Lightning's defaults with, kept below the module so that a module
can offer them under a plain Trainer (RLHFModule.configure_callbacks); lit_rlhf.callbacks exports them.

RLStepsProgressBar: Lightning's rich progress bar counting RL steps, with the score and the KL (a distillation's
reverse KL). ModelSummaryTable: Lightning's rich model summary without the FLOPs it did not count: Lightning counts
FLOPs only by running a module's `example_input_array`, which an RLHF module has none of (its inputs are rollouts),
so its summary prints a FLOPs column of zeros and "Total FLOPs: 0"; with nothing counted, this summary leaves both
out, and a module that does set `example_input_array` gets Lightning's table unchanged. The parameters' size is their
own bytes: Lightning's estimate takes the width from the Trainer's precision, which says nothing of a model loaded in
bfloat16 (model.dtype) and, for bf16-mixed (the GPU default), has none: it warned and took 32 bits.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichModelSummary, RichProgressBar
from lightning.pytorch.utilities.model_summary import get_formatted_model_size, get_human_readable_count
from torch.nn.parameter import is_lazy

LIGHTNING_SIZE_ESTIMATE = r"Precision .* is not supported by the model summary"


class RLStepsProgressBar(RichProgressBar):
    """Lightning counts optimizer steps and epochs, neither of which an RLHF run has one of per RL step:
    this bar shows RL steps done / requested (a resumed run starts where it stopped) and the last step's
    score and KL (the `score` and `kl` progress-bar metrics of RLHFModule). only_on_terminal (default): drawn only
    when stdout is a terminal; in a log file a bar is one frame printed at the end, after the run's reports, and
    ProgressLines writes the progress there instead."""

    def __init__(self, *args, only_on_terminal: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.only_on_terminal = only_on_terminal

    def setup(self, trainer: L.Trainer, module, stage: str) -> None:
        super().setup(trainer, module, stage)
        if self.only_on_terminal and not sys.stdout.isatty():
            self.disable()

    @property
    def total_train_batches(self) -> int | float:
        total = getattr(self.trainer.lightning_module, "total_rl_steps", lambda: None)()
        return super().total_train_batches if total is None else total

    def _get_train_description(self, current_epoch: int) -> str:
        return f"{'RL steps':{len(self.validation_description)}}"

    def on_train_epoch_start(self, trainer: L.Trainer, module) -> None:
        super().on_train_epoch_start(trainer, module)
        self._update(self.train_progress_bar_id, getattr(module, "rl_step", 0))

    def on_train_batch_end(self, trainer: L.Trainer, module, outputs, batch, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, module, outputs, batch, batch_idx)
        self._update(self.train_progress_bar_id, getattr(module, "rl_step", batch_idx + 1))
        self.refresh()


def parameter_megabytes(module: L.LightningModule) -> float:
    """The bytes of the module's parameters, in MB as Lightning counts them (1e6 bytes)."""
    return sum(p.numel() * p.element_size() for p in module.parameters() if not is_lazy(p)) / 1e6


class ModelSummaryTable(RichModelSummary):
    model_megabytes: float | None = None

    def on_fit_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.model_megabytes = parameter_megabytes(module)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=LIGHTNING_SIZE_ESTIMATE)
            super().on_fit_start(trainer, module)

    def summarize(self, summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int,
                  **summarize_kwargs: Any) -> None:
        """Lightning's summary (a static method there, called on the callback), with the parameters' own size."""
        model_size = model_size if self.model_megabytes is None else self.model_megabytes
        if total_flops:
            return RichModelSummary.summarize(summary_data, total_parameters, trainable_parameters, model_size,
                                              total_training_modes, total_flops, **summarize_kwargs)
        from rich import get_console
        from rich.table import Table

        columns = [(name, values) for name, values in summary_data if name != "FLOPs"]
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for name, _ in columns:
            table.add_column(name or " ", style="dim" if not name else None,
                             justify="left" if name in ("", "Name", "Type", "Mode") else "right")
        for row in zip(*(values for _, values in columns), strict=True):
            table.add_row(*row)
        console = get_console()
        console.print(table)
        grid = Table.grid(expand=True)
        grid.add_column()
        frozen = total_parameters - trainable_parameters
        for label, value in (("Trainable params", get_human_readable_count(int(trainable_parameters))),
                             ("Non-trainable params", get_human_readable_count(int(frozen))),
                             ("Total params", get_human_readable_count(int(total_parameters))),
                             ("Total params size (MB)", get_formatted_model_size(model_size)),
                             ("Modules in train mode", total_training_modes["train"]),
                             ("Modules in eval mode", total_training_modes["eval"])):
            grid.add_row(f"[bold]{label}[/]: {value}")
        console.print(grid)
