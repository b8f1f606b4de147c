"""ModelSummaryTable: Lightning's rich model summary without the FLOPs it did not count.

Lightning counts FLOPs only by running a module's `example_input_array`, which an RLHF module has none of (its
inputs are rollouts), so its summary prints a FLOPs column of zeros and "Total FLOPs: 0". With nothing counted,
this summary leaves both out; a module that does set `example_input_array` gets Lightning's table unchanged.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import RichModelSummary
from lightning.pytorch.utilities.model_summary import get_formatted_model_size, get_human_readable_count


class ModelSummaryTable(RichModelSummary):
    @staticmethod
    def summarize(summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int,
                  **summarize_kwargs: Any) -> None:
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
                             ("Total estimated model params size (MB)", get_formatted_model_size(model_size)),
                             ("Modules in train mode", total_training_modes["train"]),
                             ("Modules in eval mode", total_training_modes["eval"])):
            grid.add_row(f"[bold]{label}[/]: {value}")
        console.print(grid)
