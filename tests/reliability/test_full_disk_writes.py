"""A full disk while a report or log file is written: the OSError names the file, so the run's line says which one."""

import errno
from pathlib import Path

import pytest


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")  # as a write on a full disk raises: no file name


@pytest.mark.parametrize("written", ["evaluation.json", "summary.csv", "curves.png"])
def test_a_full_disk_while_writing_a_report_names_the_file(written, tmp_path, monkeypatch):
    """The run's line on a full disk ("no space left writing <file>") said "writing a file" for the evaluation's
    files, a sweep's summary.csv, the curves, samples.jsonl and gold.json."""
    import builtins

    from lit_rlhf.cli.sweeps import write_summary
    from lit_rlhf.evaluation.compare import Evaluation
    from lit_rlhf.evaluation.report import write_report
    from lit_rlhf.plot import plot_series

    if written == "evaluation.json":
        monkeypatch.setattr(Path, "write_text", no_space)
        write = lambda: write_report(Evaluation(summary={}, records=[]), tmp_path)  # noqa: E731
    elif written == "summary.csv":
        monkeypatch.setattr(builtins, "open", no_space)
        write = lambda: write_summary(tmp_path)  # noqa: E731
    else:
        import matplotlib.figure

        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", no_space)
        write = lambda: plot_series({"objective/scores": ([0.0, 1.0], [0.1, 0.2])}, tmp_path / written)  # noqa: E731
    with pytest.raises(OSError) as raised:
        write()
    assert raised.value.filename == str(tmp_path / written)
