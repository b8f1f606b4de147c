"""A busy machine says so: torch threads above the usable cores at start, other processes holding the cores in the
first RL step."""

import pytest
import torch

import lit_rlhf.callbacks.busy as busy
from tests.apps import run_app
from tests.helpers import FAST


def test_threads_above_the_usable_cores_name_the_setting_that_fits():
    assert busy.too_many_threads(threads=2, ranks_here=1, cpus=2) is None
    assert busy.too_many_threads(threads=1, ranks_here=2, cpus=2) is None
    line = busy.too_many_threads(threads=8, ranks_here=1, cpus=2)
    assert "torch runs 8 threads but this process may use 2 CPU core(s)" in line and "OMP_NUM_THREADS=2 " in line
    line = busy.too_many_threads(threads=2, ranks_here=2, cpus=2)
    assert "in each of 2 ranks" in line and "OMP_NUM_THREADS=1 " in line and "torch.set_num_threads(1)" in line


def test_a_first_step_short_of_cpu_on_a_loaded_machine_is_busy_and_either_alone_is_not():
    assert "load average is 6.3 on 2 usable CPU core(s)" in busy.busy_cores(cpu_share=0.3, load=6.3, cpus=2)
    assert "got 30% of the CPU time" in busy.busy_cores(cpu_share=0.3, load=6.3, cpus=2)
    assert busy.busy_cores(cpu_share=0.9, load=6.3, cpus=2) is None  # a loaded machine that still gave us our share
    assert busy.busy_cores(cpu_share=0.3, load=1.5, cpus=2) is None  # waiting on something else (a server, a disk)


def test_usable_cpus_follow_the_affinity():
    import os

    assert 1 <= busy.usable_cpus() <= len(os.sched_getaffinity(0))


@pytest.mark.integration
def test_train_py_prints_both_lines_on_an_oversubscribed_machine(tmp_path, monkeypatch):
    """The default callbacks of `python train.py` on a 1-core budget with 2 torch threads, under a load of 9 that
    leaves the first step a tenth of its CPU time."""
    monkeypatch.setattr(busy, "usable_cpus", lambda: 1)
    monkeypatch.setattr(busy.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    seconds = iter([0.0, 0.0001])
    monkeypatch.setattr(busy, "cpu_seconds", lambda: next(seconds))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        result = run_app("train.py", *FAST, cwd=tmp_path)
    finally:
        torch.set_num_threads(threads)
    assert result.returncode == 0, result.stderr[-3000:]
    console = result.stdout + result.stderr
    assert "torch runs 2 threads but this process may use 1 CPU core(s)" in console
    assert "this machine is busy: the load average is 9.0 on 1 usable CPU core(s)" in console
    quiet = run_app("train.py", *FAST, "callbacks.busy_machine.enabled=false", cwd=tmp_path)
    assert quiet.returncode == 0 and "this machine is busy" not in quiet.stdout + quiet.stderr
