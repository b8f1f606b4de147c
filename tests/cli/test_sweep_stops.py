"""Stopping a sweep whose jobs run in a launcher's workers: the sweep's process side, and what counts as nothing."""

import json
import signal

import pytest
from omegaconf import OmegaConf

from lit_rlhf.cli import sweep_stops
from lit_rlhf.cli.run_dirs import holds_nothing_of_a_run
from lit_rlhf.cli.sweep_stops import (
    STOP_MARKER,
    listen_for_stops,
    runs_jobs_in_local_workers,
    stop_listening,
    sweep_stop_line,
    sweep_stopping,
)
from lit_rlhf.cli.sweeps import stopped_sweep_line


def test_the_first_stop_marks_the_sweep_as_stopping_a_second_ctrl_c_is_the_workers_and_a_third_ends_it(tmp_path,
                                                                                                         capsys):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    listen_for_stops(tmp_path)
    try:
        signal.raise_signal(signal.SIGINT)  # returns: the workers stop their jobs, the sweep's process waits
        assert sweep_stopping(tmp_path) and (tmp_path / STOP_MARKER).read_text() == "SIGINT\n"
        signal.raise_signal(signal.SIGTERM)  # a later SIGTERM changes nothing
        assert (tmp_path / STOP_MARKER).read_text() == "SIGINT\n"
        signal.raise_signal(signal.SIGINT)  # returns: the workers heard it too, and abort their steps
        with pytest.raises(KeyboardInterrupt):  # joblib kills its workers on it
            signal.raise_signal(signal.SIGINT)
    finally:
        stop_listening(tmp_path)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert not sweep_stopping(tmp_path)
    assert capsys.readouterr().err.splitlines() == [
        "Ctrl-C: the sweep's jobs in progress stop after their step in progress (Ctrl-C again to end them at once, "
        "without their step in progress); the jobs not started yet will not run.",
        "Ctrl-C again: the sweep's jobs in progress end at once, without their step in progress (a third Ctrl-C kills "
        "the workers where they are)."]
    line, code = sweep_stop_line([1, 2])
    assert code == 130 and line.startswith("The sweep stopped by Ctrl-C: its jobs 1 and 2 stopped, each as its line "
                                           "above says (and how to resume it), and the jobs not started then did not")
    assert sweep_stop_line([1]) is None  # said once


def test_a_sigterm_stop_ends_the_sweep_with_143_and_no_stop_no_line(tmp_path):
    assert sweep_stop_line([]) is None
    listen_for_stops(tmp_path)
    try:
        signal.raise_signal(signal.SIGTERM)
    finally:
        stop_listening(tmp_path)
    assert sweep_stop_line([]) == (f"The sweep stopped by SIGTERM: the jobs not started then did not run; summary.csv "
                                   f"in {tmp_path} lists the jobs that ran.", 143)


def test_a_sweep_whose_sweeper_raised_after_the_stop_ends_in_the_stops_line_after_its_summary(tmp_path, capsys,
                                                                                              monkeypatch):
    """Optuna's sweeper goes on asking for trials after the stop (each passed over) and raises at the end, as no trial
    completed: the sweep ends in the stop's line, after the summary Hydra's end of the multirun did not write."""
    monkeypatch.setattr("lit_rlhf.cli.sweeps.STARTED_SWEEP", {})  # as a new process's: a sweep run before in this
    # test process (xdist's worker) left it summarized
    result = {"job": 1, "status": "interrupted", "overrides": ["algo.kl_coef=0.1"], "objective": None, "metrics": {},
              "run_dir": str(tmp_path / "1"), "error": "stopped by Ctrl-C after RL step 3 of 9; resume with: ..."}
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "result.json").write_text(json.dumps(result))
    listen_for_stops(tmp_path)
    signal.raise_signal(signal.SIGINT)
    line, code = stopped_sweep_line()
    assert code == 130 and line.startswith("The sweep stopped by Ctrl-C: its job 1 stopped, each as its line above")
    assert (tmp_path / "summary.csv").read_text().splitlines()[1].startswith("1,interrupted,algo.kl_coef=0.1,")
    assert "Sweep summary (1 runs)" in capsys.readouterr().out
    assert not (tmp_path / STOP_MARKER).exists() and stopped_sweep_line() is None


def test_joblibs_launcher_runs_the_jobs_in_local_workers_and_hydras_basic_one_in_its_process():
    launcher = lambda target: OmegaConf.create({"hydra": {"launcher": {"_target_": target}}})  # noqa: E731
    assert not runs_jobs_in_local_workers(launcher("hydra._internal.core_plugins.basic_launcher.BasicLauncher"))
    assert runs_jobs_in_local_workers(launcher("hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"))


def test_a_sweep_directory_whose_jobs_hold_only_hydras_start_files_holds_nothing_of_a_run(tmp_path):
    for name in ("multirun.yaml", ".run.lock", STOP_MARKER, "0/.hydra/config.yaml", "1/.hydra/overrides.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    (tmp_path / "1" / "train.log").write_text("")
    assert holds_nothing_of_a_run(tmp_path)
    (tmp_path / "1" / "result.json").write_text("{}")
    assert not holds_nothing_of_a_run(tmp_path)


@pytest.fixture(autouse=True)
def no_stop_left():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    yield
    sweep_stops._stop.clear()
    signal.signal(signal.SIGINT, before[0])
    signal.signal(signal.SIGTERM, before[1])
