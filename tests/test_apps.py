"""tests.apps.run_app, which every test of the apps relies on: a run in the test's process ends as a user's process
does, and leaves this process as it found it."""

import logging
import os
import signal
import sys
import warnings

import pytest
import torch

from tests.apps import run_app, run_process
from tests.helpers import FAST

pytestmark = pytest.mark.integration  # runs a Trainer or an app


def process_state() -> dict:
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    return {"cwd": os.getcwd(), "env": dict(os.environ), "argv": sys.argv[:], "path": sys.path[:],
            "root_handlers": logging.getLogger().handlers[:], "root_level": logging.getLogger().level,
            "filters": warnings.filters[:], "showwarning": warnings.showwarning,
            "signals": {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)},
            "rng": torch.random.get_rng_state(), "threads": torch.get_num_threads(),
            "hydra": GlobalHydra.instance().is_initialized(), "hydra_config": HydraConfig.initialized(),
            "process_group": torch.distributed.is_initialized()}


def assert_same_state(before: dict, after: dict) -> None:
    for key, value in before.items():
        if key == "rng":
            assert torch.equal(after[key], value), key
        else:
            assert after[key] == value, key


def test_a_bad_input_ends_in_this_process_as_in_a_users_process(tmp_path):
    args = [*FAST, "algo.kl_coeff=0.1"]
    (tmp_path / "app").mkdir()
    (tmp_path / "process").mkdir()
    in_process = run_app("train.py", *args, cwd=tmp_path / "app")
    process = run_process("train.py", *args, cwd=tmp_path / "process")
    assert in_process.returncode == process.returncode == 2
    assert in_process.stderr.strip().splitlines()[-1] == process.stderr.strip().splitlines()[-1] == (
        "error: algo.kl_coeff is not a setting (did you mean 'kl_coef'?); see `python train.py --cfg job` for every "
        "key.")


LAUNCHING_RANK = """import subprocess, sys
from lit_rlhf.distributed.grace_launcher import LostRankObserver

other = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(1); sys.exit(3)"])
LostRankObserver([other], rank=0, world_size=2, where_to_resume=lambda: "", grace_s=0.2, sleep_period=0.1).start()
print("rank 0 finished")
"""


def test_a_rank_that_fails_after_rank_zero_finished_fails_the_run_and_its_observer_ends_no_process(tmp_path):
    """As train.py's launcher does: rank 0 here watches the rank it started, which fails once rank 0 has finished."""
    from tests.apps import child_process_observers

    (tmp_path / "launch.py").write_text(LAUNCHING_RANK)
    before = set(child_process_observers())
    result = run_app(str(tmp_path / "launch.py"), cwd=tmp_path)
    assert result.stdout == "rank 0 finished\n"
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == "tests.apps: rank 1 ended with exit code 3 after rank 0 finished"
    for observer in set(child_process_observers()) - before:  # (none if it has already ended)
        observer.join(timeout=5)  # its next poll ends it, instead of os._exit on this process after its grace
        assert not observer.is_alive()


def test_a_users_process_prints_each_of_lightnings_lines_once(tmp_path):
    """A user's process imports Lightning once Hydra has set up logging (this test process imports it first:
    tests/conftest.py), so Lightning's loggers pass their lines up to Hydra's console as well as printing them."""
    result = run_process("train.py", *FAST, "hydra.run.dir=run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    output = (result.stdout + result.stderr).splitlines()
    for line in ("Seed set to 0", "GPU available: False, used: False"):  # Lightning's fabric and trainer loggers
        assert sum(line in printed for printed in output) == 1, (line, result.stderr[-3000:])


def test_a_run_leaves_the_process_as_it_found_it_and_prints_its_warnings(tmp_path):
    before = process_state()
    trained = run_app("train.py", *FAST, "algo.max_staleness=1", "algo.async_draws=3", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    # a warning lit_rlhf gives at construction reaches the run's stderr, as in a process, not pytest's record
    assert "algo.async_draws=3: at most algo.max_staleness + 1 rollouts can be drawn at once" in trained.stderr
    assert "Run directory: " in trained.stdout
    failed = run_app("train.py", *FAST, "algo.kl_coef=-1", cwd=tmp_path)
    assert failed.returncode == 2
    assert_same_state(before, process_state())
    again = run_app("train.py", *FAST, "algo.max_staleness=1", "algo.async_draws=3", cwd=tmp_path)
    assert "algo.async_draws=3: at most" in again.stderr  # said again: the warned-once set is per run


def test_a_full_fine_tune_says_nothing_of_its_frozen_reference_in_eval_mode(tmp_path):
    """model.lora=null keeps a frozen copy of the policy as the reference, in eval mode on purpose: Lightning's check
    for modules left in eval mode (56 of them here) is not for the user to act on."""
    result = run_app("train.py", *FAST, "model.lora=null", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "in eval mode" not in result.stderr


def test_an_uncaught_error_is_exit_code_1_with_its_traceback(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("raise RuntimeError('boom')\n")
    result = run_app(str(script), cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "RuntimeError: boom"


def test_a_module_imported_from_the_users_directory_is_imported_afresh_by_the_next_run(tmp_path):
    for value in (1, 2):
        (tmp_path / "user_module.py").write_text(f"VALUE = {value * 11}\n")  # another size: no stale bytecode
        (tmp_path / "main.py").write_text("import user_module\nprint(user_module.VALUE)\n")
        assert run_app(str(tmp_path / "main.py"), cwd=tmp_path).stdout.strip() == str(value * 11)
    assert "user_module" not in sys.modules


def test_variables_read_at_import_time_need_a_process(tmp_path):
    with pytest.raises(ValueError, match=r"\['HF_HOME'\] are read when libraries are imported; use run_process"):
        run_app("train.py", cwd=tmp_path, env={"HF_HOME": str(tmp_path)})
