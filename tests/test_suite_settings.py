"""The suite's own settings (pyproject.toml's [tool.pytest.ini_options]) do what docs/testing.md says."""

import os
import subprocess
import sys

import pytest

from tests.apps import ROOT

# A test blocked where Python's signal handlers cannot run: a collective waiting on a rank that is gone waits in C
# (gloo's own timeout is 30 minutes), as this sleep does with SIGALRM blocked; and tests that end their worker, in a
# group of three and alone in a group.
CRASHING = '''
import os, signal, time
import pytest

@pytest.mark.timeout(2)
def test_blocked_in_c():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(120)

def test_after_it():
    pass

@pytest.mark.xdist_group("three")
def test_first(): pass

@pytest.mark.xdist_group("three")
def test_crash_in_a_group(): os._exit(1)

@pytest.mark.xdist_group("three")
def test_last(): pass

@pytest.mark.xdist_group("one")
def test_crash_alone(): os._exit(1)
'''


@pytest.mark.integration  # a pytest run in a process of its own
def test_a_test_that_hangs_or_ends_its_worker_fails_once_by_name_and_the_suite_goes_on(tmp_path):
    """pytest-timeout's thread method ends the worker of a test past its timeout even in a C call (its signal method
    would wait for the call to return); pytest-xdist names each crashed test and runs the rest on a new worker
    (tests/scheduling.py: its own loadgroup runs a crashed test again on every new worker, and on one worker waited
    for ever after the first crash)."""
    (tmp_path / "test_blocked.py").write_text(CRASHING)
    run = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
                          str(tmp_path), "-n", "1", "-q", "-rA", str(tmp_path / "test_blocked.py")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})  # tests.scheduling, as from the root
    assert "3 failed, 3 passed" in run.stdout, run.stdout[-2000:]
    for crashed in ("test_blocked_in_c", "test_crash_in_a_group@three", "test_crash_alone@one"):
        assert f"crashed while running 'test_blocked.py::{crashed}'" in run.stdout, crashed
    for passed in ("test_after_it", "test_first@three", "test_last@three"):
        assert f"PASSED test_blocked.py::{passed}" in run.stdout, passed
