"""The two test tiers: a test that runs a Lightning Trainer (fit, validate, test, predict) or an app
(tests.apps.run_app / run_process, or a Python process of its own), in its body or through a fixture, is marked
`integration`; every other test is a unit test, and `make test-fast` (`pytest -m "not integration"`) runs those
alone.

The marker is checked, not trusted: a test that runs a Trainer or an app without it errors at its teardown,
naming the marker, so that the fast tier stays fast as tests are added. LIT_RLHF_LIST_INTEGRATION=<file> instead
appends such tests' ids to the file (how the markers were first placed).
"""

from __future__ import annotations

import os

import pytest

MARKER = "integration"
COUNTS = {"trainers": 0, "processes": 0}  # Trainer runs, Python processes started; tests.apps counts app runs
TRAINING_FIXTURES: set[str] = set()  # fixtures seen running a Trainer or an app (in this worker)
RUNS_BEFORE = pytest.StashKey[int]()  # an item's count when it started


def install_counters() -> None:
    """Wraps Lightning's Trainer runs (fit, validate, test, predict) and subprocess.Popen.__init__ once: the runs,
    and the Python processes started (an app as a process of its own). Building a Trainer alone is cheap."""
    import subprocess
    import sys

    from lightning.pytorch import Trainer

    if getattr(Trainer.fit, "counted", False):
        return

    def counted(run):
        def counted_run(self, *args, **kwargs):
            COUNTS["trainers"] += 1
            return run(self, *args, **kwargs)
        counted_run.counted = True
        return counted_run

    for name in ("fit", "validate", "test", "predict"):
        setattr(Trainer, name, counted(getattr(Trainer, name)))
    start = subprocess.Popen.__init__

    def counted_start(self, args, *rest, **kwargs):
        if isinstance(args, (list, tuple)) and args and args[0] == sys.executable:
            COUNTS["processes"] += 1
        return start(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = counted_start


def runs_so_far() -> int:
    from tests import apps

    return COUNTS["trainers"] + COUNTS["processes"] + apps.RUNS["apps"]


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    before = runs_so_far()
    yield
    if runs_so_far() > before:
        TRAINING_FIXTURES.add(fixturedef.argname)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    install_counters()
    item.stash[RUNS_BEFORE] = runs_so_far()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when != "teardown" or item.get_closest_marker(MARKER):
        return
    built = runs_so_far() > item.stash.get(RUNS_BEFORE, runs_so_far())
    through = sorted(TRAINING_FIXTURES & set(item.fixturenames))
    if not built and not through:
        return
    listing = os.environ.get("LIT_RLHF_LIST_INTEGRATION")
    if listing:
        with open(listing, "a") as f:
            f.write(item.nodeid + "\n")
        return
    report = outcome.get_result()
    if report.passed:
        how = f"through the fixture {through[0]}" if through and not built else "in its body"
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} runs a Lightning Trainer or an app ({how}) without "
                           f"@pytest.mark.{MARKER}: mark it (tests/tiers.py), so that make test-fast leaves it out.")
