"""Curves of a finished run, from its CSV log (or metrics collected during the run), as one PNG.

    python -m lit_rlhf.plot RUN_DIR [--out curves.png]
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

from lit_rlhf.errors import empty_value_line, exit_with_user_error, writing
from lit_rlhf.terminal import escape_what_libraries_print, printable

CONSTANT_UNLESS_MOVING = ("objective/kl_coef", "val/ratio")
CURVES = ["objective/scores", "objective/rlhf_reward", "objective/kl", "objective/entropy", "val/ratio",
          "val/var_explained", "eval/scores", "objective/kl_coef"]


# held-out metrics that are not task metrics (task metrics, e.g. eval/exact_match, get a panel each)
NOT_TASK_METRICS = ("eval/scores", "eval/kl", "eval/rlhf_reward")
# a run of train_sft.py, train_dpo.py, train_kto.py or train_reward_model.py, which logs none of CURVES: its losses,
# margins and accuracies, by optimizer step
FIT_CURVES = ["loss", "eval/loss", "rewards/margins", "eval/rewards/margins", "eval/rewards/accuracies",
              "mean_token_accuracy", "eval/mean_token_accuracy", "train/loss", "val/loss", "train/accuracy",
              "val/accuracy", "val/margin"]


def x_axis(path: Path) -> str:
    """What a metrics.csv's curves are drawn against: the episodes of an RL run, else the steps."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return "episode" if "episode" in (csv.DictReader(f).fieldnames or []) else "step"


def read_metrics(path: Path) -> dict[str, tuple[list[float], list[float]]]:
    """{metric: (episodes, or steps where no episode is logged, values)} from a Lightning CSVLogger metrics.csv."""
    series: dict[str, tuple[list[float], list[float]]] = {}
    x = 0.0
    axis = x_axis(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            try:
                x = float(row[axis]) if row.get(axis) else x  # RL eval rows: the episode they follow
                values = {k: float(v) for k, v in row.items() if v not in ("", None) and k not in ("step", "epoch")}
            except (TypeError, ValueError) as err:
                raise ValueError(f"{path}, line {line}: not a number ({err}); give the metrics.csv a CSV logger "
                                 f"wrote.") from err
            for key, value in values.items():
                if key != "episode":
                    series.setdefault(key, ([], []))
                    series[key][0].append(x)
                    series[key][1].append(value)
    return series


def find_metrics_csvs(run_dir: Path) -> list[Path]:
    """Every metrics.csv under run_dir, the newest last (several: a folder of runs, or a plain CSVLogger's versions)."""
    if not run_dir.exists():
        raise FileNotFoundError(f"{run_dir} does not exist; give a run directory (the `Run directory:` a run prints).")
    if run_dir.is_file():  # e.g. <run>/csv/metrics.csv itself
        folder = run_dir.parent.parent if run_dir.parent.name == "csv" else run_dir.parent
        raise FileNotFoundError(f"{run_dir} is a file; give the run directory that holds it: python -m lit_rlhf.plot "
                                f"{folder}")
    found = sorted(run_dir.rglob("metrics.csv"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(f"no metrics.csv under {run_dir}; give a run directory written with logger=csv.")
    return found


def plot_curves(metrics_csv: Path, out: Path) -> Path:
    return plot_series(read_metrics(metrics_csv), out, x_axis(metrics_csv))


def curve_names(series: dict[str, tuple[list[float], list[float]]]) -> list[str]:
    """The panels: each curve of CURVES that was logged and moves (a constant kl_coef, or val/ratio that the single
    update keeps at exactly 1, says nothing as a curve), then one per named reward and per task metric; for a run
    with none of CURVES (a fit on a file), those of FIT_CURVES it logged."""
    names = [n for n in CURVES if n in series and (n not in CONSTANT_UNLESS_MOVING or len(set(series[n][1])) > 1)]
    if not names:
        return [n for n in FIT_CURVES if n in series]
    names += sorted(n for n in series if n.startswith("rewards/") and n.endswith("/mean"))
    names += sorted(n for n in series if n.startswith("eval/") and n not in NOT_TASK_METRICS and len(series[n][1]) > 1)
    return names


def plot_series(series: dict[str, tuple[list[float], list[float]]], out: Path, x_label: str = "episode") -> Path:
    """One PNG of the curve_names panels, against x_label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = curve_names(series)
    cols = 3
    rows = max(1, math.ceil(len(names) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        x, y = series[name]
        ax.plot(x, y, marker="o" if len(x) < 10 else None, linewidth=1.2)
        ax.set_title(name)
        ax.set_xlabel(x_label)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    with writing(out):  # a full disk's line names the file
        fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def check_image_format(out: Path) -> None:
    """An --out whose suffix is no image format matplotlib writes (curves.txt): one line, before anything is drawn."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if out.suffix and out.suffix[1:].lower() not in formats:
        raise ValueError(f"--out={str(out)!r}: {out.suffix} is not an image format the plot is written in "
                         f"({', '.join(sorted(formats))}); give e.g. curves.png.")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m lit_rlhf.plot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--out", default=None, help="default: RUN_DIR/curves.png")
    args = parser.parse_args()
    escape_what_libraries_print()
    if args.out is not None and not args.out.strip():  # read as a path, "" is the working directory
        exit_with_user_error(empty_value_line(f"--out={args.out!r}", "give a file (e.g. curves.png) or a folder, or "
                                              "leave --out out (RUN_DIR/curves.png)"))
    try:
        found = find_metrics_csvs(args.run_dir)
        series = read_metrics(found[-1])
        if not curve_names(series):
            raise ValueError(f"{found[-1]} holds none of the curves this draws ({', '.join(CURVES[:3])}, ..., or a "
                             f"fit's loss); give the directory of a run of lit_rlhf's apps.")
        out = Path(args.out) if args.out is not None else args.run_dir / "curves.png"
        if out.is_dir():  # savefig would write <out>.png beside it
            out = out / "curves.png"
        elif not out.suffix:  # savefig writes <out>.png: the line printed names the file written
            out = out.with_name(out.name + ".png")
        check_image_format(out)
    except (FileNotFoundError, ValueError) as err:
        exit_with_user_error(err)
    try:
        out = plot_series(series, out, x_axis(found[-1]))
    except OSError as err:
        exit_with_user_error(f"cannot write --out={str(out)!r} ({err.strerror or err}); give a file in a folder you "
                             f"can write to.")
    # a folder of runs: say which one was drawn (the newest), and how to draw another
    which = (f" (from {found[-1]}, the newest of {len(found)} metrics.csv under {args.run_dir}; give one run's "
             f"directory for another)") if len(found) > 1 else ""
    print(printable(f"{out}{which}"))


if __name__ == "__main__":
    main()
