"""Hydra multirun support: the objective a sweeper optimizes, per-trial results, the sweep summary.

Every run writes <run dir>/result.json (status, objective, final metrics, overrides, error); at the
end of a multirun, SweepSummary (a Hydra callback) gathers them into <sweep dir>/summary.csv and
prints a table.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig
from rich.table import Table

from lit_rlhf.cli.sweep_stops import (
    listen_for_stops,
    runs_jobs_in_local_workers,
    stop_heard_in,
    stop_listening,
    sweep_stop_line,
)
from lit_rlhf.errors import ConfigError, nearest, writing
from lit_rlhf.terminal import as_text, config_without_passwords, plain_console, printable

RESULT_FILE = "result.json"
SUMMARY_METRICS = ("objective/scores", "objective/kl", "objective/rlhf_reward", "eval/scores", "eval/kl",
                   "eval/rlhf_reward", "eval/score_diff", "eval/win_rate")


def kl_budget_objective(value: float, kl: float | None, kl_budget: float | None, penalty: float) -> float:
    """value - penalty per nat of KL above the budget: a trial cannot buy reward with KL past it."""
    if kl_budget is None or kl is None:
        return value
    return value - penalty * max(0.0, kl - kl_budget)


def config_objective(metrics: dict[str, float], cfg: DictConfig) -> float | None:
    """The number train() returns to a sweeper: cfg.optimized_metric, minus the KL-budget penalty
    (cfg.kl_budget_penalty per nat of held-out KL, eval/kl, above cfg.kl_budget)."""
    name = cfg.get("optimized_metric")
    if not name or (name not in metrics and held_out_none(cfg) and not in_multirun()):  # no eval/* to optimize
        return None
    if name not in metrics and (count := held_out_none(cfg)):
        raise ConfigError(none_held_out_line(name, count))
    if name not in metrics:
        raise ConfigError(f"optimized_metric={name!r} was not logged; pick one of {sorted(metrics)}.")
    return kl_budget_objective(metrics[name], metrics.get("eval/kl"), cfg.get("kl_budget"),
                               cfg.get("kl_budget_penalty", 1.0))


# Metric families a training step logs (their names depend on the algorithm and the rewards).
TRAINING_PREFIXES = ("objective/", "policy/", "loss/", "val/", "rollout/", "rewards/", "returns/", "tokens/",
                     "monitor/", "env/", "time/")
TRAINING_NAMES = ("lr", "episode", "eps")
HELDOUT_NAMES = ("scores", "kl", "rlhf_reward")
EVALUATION_NAMES = ("score_diff", "score_diff_ci_low", "win_rate", "kl_to_reference", "policy_score",
                    "reference_score", "policy_distinct_2")


def check_optimized_metric(cfg: DictConfig, task_metric_names: list[str]) -> None:
    """Before training: optimized_metric names a metric the run logs (held-out eval/*, the evaluation's
    eval/*, or a training metric family), not after the last step."""
    name = cfg.get("optimized_metric")
    if not name or name in TRAINING_NAMES or name.startswith(TRAINING_PREFIXES):
        return
    if name.startswith("eval/") and (count := held_out_none(cfg)):
        if in_multirun():  # the sweeper needs each job's objective
            raise ConfigError(none_held_out_line(name, count))
        return
    evals = [f"eval/{n}" for n in (*HELDOUT_NAMES, *EVALUATION_NAMES, *task_metric_names)]
    evals += [f"eval/reference_{n}" for n in task_metric_names]
    if name in evals or any(name.startswith(f"eval/{n}_") for n in task_metric_names):
        return
    hint = nearest(name, evals, noun="metrics")
    raise ConfigError(f"optimized_metric={name!r} is not a metric this run logs{hint}; pick an eval/* metric (e.g. "
                      f"eval/rlhf_reward) or a training metric (objective/scores).")


HELD_OUT_COUNTS = ("num_eval_prompts", "num_eval_pairs", "num_eval_rows")  # train.py's, the pair apps', SFT's and KTO's


def held_out_none(cfg: DictConfig) -> str | None:
    """The data.num_eval_* setting at 0 (prompts; the pair apps' pairs or rows), where there is one: no validation
    nor end-of-run evaluation, so no eval/* metric."""
    data = cfg.get("data") or {}
    return next((f"data.{count}" for count in HELD_OUT_COUNTS if data.get(count) == 0), None)


def none_held_out_line(name: str, count: str) -> str:
    example = " (optimized_metric=objective/rlhf_reward)" if count == "data.num_eval_prompts" else ""
    return (f"optimized_metric={name!r} is measured on held-out data, and {count}=0 holds none out; optimize a "
            f"training metric{example}, or hold some out.")


def in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def sweep_group() -> str | None:
    """The name W&B runs of one sweep share: <task>-<sweep dir name>."""
    if not in_multirun():
        return None
    hydra = HydraConfig.get()
    return f"{hydra.job.name}-{Path(hydra.sweep.dir).name}"


class FinalMetrics(dict):
    """A task's final metrics, with the status its result.json records: "ok", or "time_limit" (the Trainer's max_time
    stopped the fit before its last RL step; the metrics are those of the policy it stopped with)."""

    def __init__(self, metrics: dict[str, float], status: str = "ok"):
        super().__init__(metrics)
        self.status = status


def write_result(output_dir: str | Path, status: str, objective: float | None, metrics: dict[str, float],
                 error: str | None = None) -> None:
    """<output_dir>/result.json. A sweep's job resumed on its own (its stop line's command: a single run in the job's
    directory) keeps the job number and the sweep's overrides, and its sweep's summary.csv and table are written
    again with its new row."""
    output_dir = Path(output_dir)
    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    job = HydraConfig.get().job.get("num") if in_multirun() else None
    resumed_job = resumed_sweep_job(output_dir) if job is None else None
    if resumed_job:
        job, overrides = resumed_job["job"], resumed_job["overrides"]
    result = {"job": job, "status": status, "overrides": overrides, "objective": objective,
              "metrics": {k: v for k, v in metrics.items() if math.isfinite(v)}, "run_dir": str(output_dir),
              "error": error}
    partial = output_dir / f".{RESULT_FILE}.partial"  # renamed over it whole: a kill never leaves half a result
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(config_without_passwords(result), indent=2) + "\n")
        os.replace(partial, output_dir / RESULT_FILE)
    except OSError as err:  # a full disk: the run's own line (its error, its resume command) is said all the same
        partial.unlink(missing_ok=True)
        print(f"warning: {printable(output_dir / RESULT_FILE)} was not written ({printable(err.strerror)}).")
        return
    if resumed_job:
        summarize_sweep(output_dir.parent)


def resumed_sweep_job(output_dir: Path) -> dict[str, Any] | None:
    """The result.json a sweep wrote in output_dir (one with a job number), where a single run goes on in it."""
    earlier = run_result(output_dir / RESULT_FILE)
    return earlier if earlier is not None and isinstance(earlier["job"], int) else None


def run_result(path: Path) -> dict[str, Any] | None:
    """A run's result.json as write_result writes it; None for one that is not (edited, or of another program)."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    number = lambda value: value is None or isinstance(value, (int, float)) and not isinstance(value, bool)  # noqa: E731
    text = lambda value: value is None or isinstance(value, str)  # noqa: E731
    if not isinstance(result, dict) or not isinstance(result.get("metrics"), dict):
        return None
    fits = [result.get("job") is None or isinstance(result.get("job"), int) and not isinstance(result["job"], bool),
            isinstance(result.get("status"), str), text(result.get("error")), isinstance(result.get("run_dir"), str),
            isinstance(result.get("overrides"), list) and all(isinstance(o, str) for o in result["overrides"]),
            number(result.get("objective")), all(number(value) for value in result["metrics"].values())]
    return result if all(fits) else None


def summary_rows(sweep_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(sweep_dir.glob(f"*/{RESULT_FILE}"), key=lambda p: (len(p.parent.name), p.parent.name)):
        result = run_result(path)
        if result is None:
            print(f"warning: {printable(path)} is not a run's result as this library writes it; the summary leaves "
                  f"that run out.", file=sys.stderr)
            continue
        row = {"job": result["job"], "status": result["status"], "overrides": result["overrides"],
               "objective": result["objective"]}
        row.update({name: result["metrics"].get(name) for name in SUMMARY_METRICS})
        row.update(run_dir=result["run_dir"], error=result["error"])
        rows.append(row)
    return rows


def write_summary(sweep_dir: Path) -> tuple[Path, list[dict[str, Any]]]:
    rows = summary_rows(sweep_dir)
    path = sweep_dir / "summary.csv"
    with writing(path), open(path, "w", newline="") as f:  # a full disk's line names the file
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["job"])
        writer.writeheader()
        writer.writerows({**row, "overrides": " ".join(row["overrides"])} for row in rows)
    return path, rows


def swept_overrides(rows: list[dict[str, Any]]) -> list[str]:
    """Each run's overrides that differ between runs (the swept ones), as 'key=value ...'."""
    parsed = [dict((o.split("=", 1) + [""])[:2] for o in row["overrides"]) for row in rows]  # "~key": no "="
    keys = sorted({k for p in parsed for k in p if len({q.get(k) for q in parsed}) > 1})
    return [" ".join(f"{k}={p.get(k)}" for k in keys) for p in parsed]


def print_summary(rows: list[dict[str, Any]], path: Path) -> None:
    """The runs, best objective first."""
    metrics = ("objective", "objective/scores", "objective/kl", "eval/rlhf_reward", "eval/kl")
    table = Table(title=f"Sweep summary ({len(rows)} runs): {path}")
    for column in ("job", "swept overrides", "status", *metrics):
        table.add_column(column)
    ranked = sorted(zip(rows, swept_overrides(rows), strict=True),
                    key=lambda pair: -pair[0]["objective"] if pair[0]["objective"] is not None else math.inf)
    for row, swept in ranked:
        values = ("" if row[m] is None else f"{row[m]:.3f}" for m in metrics)
        table.add_row(str(row["job"]), as_text(swept), row["status"], *values)
    plain_console(width=160).print(table)
    for row in rows:
        if row["status"] == "failed":  # an interrupted run's stop line is the process's last line
            print(f"job {row['job']} failed: {printable(row['error'], one_line=True)}")


def summarize_sweep(sweep_dir: Path) -> list[dict[str, Any]]:
    """<sweep dir>/summary.csv and the printed table, of the runs that have a result.json: at the end of a multirun, or
    when Ctrl-C or SIGTERM stops it (the run in progress recorded as interrupted). Returns the rows."""
    if not sweep_dir.is_dir():
        return []
    path, rows = write_summary(sweep_dir)
    print_summary(rows, path)
    return rows


def no_completed_trial_line(err: BaseException) -> str | None:
    """For Optuna's "No trials are completed yet." (its sweeper asks for the best trial at the end of a search whose
    every trial failed, or that ran none): the trials' summary printed, and one line instead of Optuna's traceback;
    else None."""
    if not isinstance(err, ValueError) or str(err) != "No trials are completed yet.":
        return None
    sweep_dir = STARTED_SWEEP.get("dir")
    if sweep_dir is not None and any(sweep_dir.glob(f"*/{RESULT_FILE}")):
        summarize_sweep(sweep_dir)
        return (f"no trial of the search completed: each failed, as said above (and in {sweep_dir / 'summary.csv'}); "
                f"fix that and search again.")
    return (f"the search ran no trial (hydra.sweeper.n_trials={STARTED_SWEEP.get('n_trials')!r}); give "
            f"hydra.sweeper.n_trials >= 1.")


BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def check_search_objective(cfg: DictConfig) -> None:
    """A trial of a sweeper that searches (Optuna's) hands it its objective; with optimized_metric=null there is none,
    and every trial would train in full and then fail on Hydra's "Return value must be float-castable"."""
    if not in_multirun() or "optimized_metric" not in cfg or cfg.optimized_metric:
        return
    sweeper = str(HydraConfig.get().sweeper.get("_target_") or "")
    if sweeper in ("", BASIC_SWEEPER):
        return
    typed = "null" if cfg.optimized_metric is None else repr(cfg.optimized_metric)
    raise ConfigError(f"optimized_metric={typed}: the {sweeper.rsplit('.', 1)[-1]} searches for the "
                      f"trial with the best objective, and this gives it none; name the metric to optimize (e.g. "
                      f"optimized_metric=eval/rlhf_reward).")


# the multirun this process started: its directory and its sweeper's n_trials (Hydra's config is gone when the sweeper
# raises after its trials)
STARTED_SWEEP: dict[str, Any] = {}


class SweepSummary(Callback):
    """Hydra callback: <sweep dir>/summary.csv and a printed table at the end of a multirun."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        STARTED_SWEEP.clear()  # an earlier app's, run in this process
        STARTED_SWEEP.update(dir=Path(config.hydra.sweep.dir), n_trials=config.hydra.sweeper.get("n_trials"))
        os.environ[APP_ARGV] = json.dumps(sys.argv)  # inherited by the processes the launcher starts
        if runs_jobs_in_local_workers(config):
            listen_for_stops(Path(config.hydra.sweep.dir))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        stop_listening(Path(config.hydra.sweep.dir))
        rows = summarize_sweep(Path(config.hydra.sweep.dir))
        STARTED_SWEEP["every_job_failed"] = bool(rows) and all(row["status"] == "failed" for row in rows)
        STARTED_SWEEP["summarized"] = True


# the sweep's command line, for its jobs in a launcher's processes: submitit runs its own script there (sys.argv)
APP_ARGV = "LIT_RLHF_APP_ARGV"


def app_argv() -> list[str]:
    """The command line of the app this run belongs to: this process's, or, for a sweep's job in a launcher's worker,
    the sweep's (which SweepSummary passes on)."""
    if in_multirun() and not in_the_sweeps_process():
        try:
            argv = json.loads(os.environ.get(APP_ARGV, ""))
        except ValueError:
            argv = None
        if isinstance(argv, list) and argv and all(isinstance(word, str) for word in argv):
            return argv
    return sys.argv


def in_the_sweeps_process() -> bool:
    """Whether this sweep's job runs in the process that started the sweep (Hydra's default launcher), not in a
    launcher's worker (joblib, submitit), where the multirun's start did not run."""
    return "dir" in STARTED_SWEEP


def stopped_sweep_line() -> tuple[str, int] | None:
    """Once the multirun this process started has ended, or its sweeper raised after it (Optuna's when no trial
    completed, the stopped ones included): the line and exit code of a sweep that a stop ended while its jobs ran in
    workers, after the summary of the jobs that ran; else None."""
    sweep_dir = stop_heard_in()
    if sweep_dir is None:
        return None
    stop_listening(sweep_dir)
    rows = summary_rows(sweep_dir) if STARTED_SWEEP.pop("summarized", False) else summarize_sweep(sweep_dir)
    return sweep_stop_line([row["job"] for row in rows if row["status"] == "interrupted"])


def every_job_failed_line() -> str | None:
    """Once the multirun this process started has ended: the line for a sweep none of whose jobs completed (its exit
    code is then 2, not 0: a script that runs it sees the failure), else None."""
    if not STARTED_SWEEP.pop("every_job_failed", False):  # said once: not again by a later app in this process
        return None
    return (f"every job of the sweep failed, as said above (and in {STARTED_SWEEP['dir'] / 'summary.csv'}); fix that "
            f"and sweep again.")
