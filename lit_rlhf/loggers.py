"""Lightning's loggers as the apps configure them (conf/logger).

ResumingCSVLogger keeps the rows of the run it resumes: Lightning's CSVLogger deletes an existing metrics.csv when it
starts. A run directory holds files only when a run resumes in it (see lit_rlhf/cli/run_dirs.py), so this one keeps
the earlier rows that the resumed run does not log again (`rows_not_logged_again`).

WandbLogger is Lightning's without the `anonymous` argument it passes wandb.init whether a user set it or not:
wandb's releases that dropped anonymous mode warn about it on every run ("The anonymous setting has no effect"); and
a W&B server that cannot be reached, or refuses the API key, is one line (UnavailableError) instead of wandb's trace.
"""

from __future__ import annotations

import csv
import io
import os
import warnings

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from lit_rlhf.errors import ConfigError, UnavailableError, writing
from lit_rlhf.hub import reachable
from lit_rlhf.terminal import clipped, printable


class ResumingExperimentWriter(ExperimentWriter):
    def _check_log_dir_exists(self) -> None:
        self.previous_rows: list[dict[str, str]] | None = None
        if self._fs.isfile(self.metrics_file_path):
            self.previous_rows, self.metrics_keys = previous_rows(self._fs, self.metrics_file_path)

    def save(self) -> None:
        with writing(self.metrics_file_path):  # a full disk's error names metrics.csv
            if self.previous_rows is not None and self.metrics:
                kept = rows_not_logged_again(self.previous_rows, self.metrics[0])
                rewrite(self._fs, self.metrics_file_path, self.metrics_keys, kept)
                self.previous_rows = None
            super().save()

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        """Lightning's, whole or not at all: a metric logged for the first time (the first validation, the end of run
        evaluation) rewrites every row under the new header, and a kill midway left a truncated file."""
        with self._fs.open(self.metrics_file_path, "r", newline="") as file:
            rows = list(csv.DictReader(file))
        rewrite(self._fs, self.metrics_file_path, fieldnames, rows)


def rewrite(fs, path: str, fieldnames: list[str], rows: list[dict[str, str]]) -> None:
    """metrics.csv with these columns and rows, written beside it and moved over it (a rename where the filesystem
    is local): a kill leaves the old file or the new one."""
    partial = f"{path}.partial"
    with fs.open(partial, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)
    fs.mv(partial, path)


def previous_rows(fs, path: str) -> tuple[list[dict[str, str]], list[str]]:
    """The rows and columns of the metrics.csv a resumed run appends to. One that this logger cannot read (not UTF-8
    text, not CSV, a row without a whole-number step) is one line when the logger starts, before the fit, with the
    file left as it is; a last row without its line end, which a kill or a full disk cut short, is dropped."""
    fix = "move it aside (the resumed run then starts a new one) or mend it, and resume again"
    rows = []
    try:
        with fs.open(path, "r", newline="", encoding="utf-8") as file:
            text = file.read()
        if text and not text.endswith("\n"):  # a row cut short: the earlier run was killed, or its disk full, mid-row
            warnings.warn(f"{printable(path)}: its last row was cut short (the earlier run ended while writing it) "
                          f"and is dropped; the resumed run logs the steps after its checkpoint's.", stacklevel=2)
            text = text[:text.rfind("\n") + 1]
        reader = csv.DictReader(io.StringIO(text, newline=""))
        for row in reader:
            step = row.get("step")
            if not (isinstance(step, str) and step.isdecimal()):
                found = "no step" if step is None else f"step={printable(step)!r}, not a whole number"
                raise ConfigError(f"{printable(path)}, line {reader.line_num}: {found} (the resumed run's rows are "
                                  f"placed by their step); {fix}.")
            rows.append(row)
    except (UnicodeDecodeError, csv.Error) as err:
        raise ConfigError(f"{printable(path)} cannot be read as the run's CSV metrics ({printable(clipped(err))}); "
                          f"{fix}.") from err
    return rows, sorted(reader.fieldnames or [])


def rows_not_logged_again(previous_rows: list[dict[str, str]], first_new_row: dict) -> list[dict[str, str]]:
    """The rows of the run a resume continues that come before the resumed run's first row: up to that row's own, when
    the earlier run wrote it (a row at its step with one of its metrics), else those at its step or before (the
    earlier run stopped while it was due). A checkpoint written in the held-out evaluation after a step resumes with
    that evaluation, at the step of the training row already written, which stays.

    Two rows at one step can share metrics: the starting policy's evaluation and the one after RL step 1 are both at
    step 0. The row logged again is the one with the most of its columns in common (only Lightning's rows have
    `epoch`; the starting policy's is logged beside Lightning), the first of equals."""
    step = int(first_new_row["step"])
    columns = set(first_new_row) - {"step"}
    metrics = columns - {"epoch"}
    shared = {i: sum(bool(row.get(key)) for key in columns) for i, row in enumerate(previous_rows)
              if int(row["step"]) == step and any(row.get(key) for key in metrics)}
    if shared:
        return previous_rows[:max(shared, key=lambda i: (shared[i], -i))]
    return [row for row in previous_rows if int(row["step"]) <= step]


class ResumingCSVLogger(CSVLogger):
    """lightning's CSVLogger, appending to the metrics.csv of a resumed run instead of deleting it."""

    @property
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = ResumingExperimentWriter(log_dir=self.log_dir)
        return self._experiment


class WandbLogger(LightningWandbLogger):
    def __init__(self, *args, anonymous: bool | None = None, **kwargs):
        super().__init__(*args, anonymous=anonymous, **kwargs)
        if self._wandb_init.get("anonymous") is None:  # not asked for: wandb.init gets no such argument
            self._wandb_init.pop("anonymous", None)

    @property
    def experiment(self):
        from wandb.errors import AuthenticationError, CommError

        if self._experiment is None and not self._offline and rank_zero_only.rank == 0:
            self.check_server_reachable()
        try:
            return super().experiment
        except AuthenticationError as err:
            raise UnavailableError(f"logger=wandb: the W&B server refused the API key ({first_line(err)}); run `wandb "
                                   f"login` or set WANDB_API_KEY, or log offline with WANDB_MODE=offline.") from err
        except CommError as err:
            raise UnavailableError(f"logger=wandb: W&B could not reach its server ({first_line(err)}); check the "
                                   f"network (and WANDB_BASE_URL), or log offline with WANDB_MODE=offline and upload "
                                   f"later with `wandb sync`.") from err

    def check_server_reachable(self) -> None:
        """wandb.init waits init_timeout (90 s) for a server it cannot reach before its own error."""
        import wandb

        settings = self._wandb_init.get("settings")
        base_url = (getattr(settings, "base_url", None) if settings is not None and not isinstance(settings, dict)
                    else (settings or {}).get("base_url"))
        base_url = base_url or os.environ.get("WANDB_BASE_URL") or wandb.setup().settings.base_url
        if wandb.run is None and not reachable(base_url):
            raise UnavailableError(f"logger=wandb: W&B could not reach its server ({printable(base_url)} cannot be "
                                   f"reached); check the network (and WANDB_BASE_URL), or log offline with "
                                   f"WANDB_MODE=offline and upload later with `wandb sync`.")


def first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
