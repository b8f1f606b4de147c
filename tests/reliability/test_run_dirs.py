"""Run directories: sweeps work from a clean working directory as the README types them, default run
directories are unique, and no run writes into another run's directory."""

import csv
import logging
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lit_rlhf.cli.run_dirs import new_run_dir, remove_unused_run_dir, run_dirs_named_not_created
from tests.apps import run_app
from tests.helpers import FAST, ROOT, one_line_error


def readme_command(prefix: str) -> list[str]:
    """The README's first `python train.py <prefix> ...` command, as arguments."""
    text = (ROOT / "README.md").read_text()
    line = re.search(rf"python train\.py {re.escape(prefix)}[^`\n]*", text).group(0)
    return line.split()[2:]


@pytest.mark.integration
def test_the_readme_sweep_runs_from_a_clean_working_directory_without_a_sweep_dir(tmp_path):
    args = readme_command("-m")
    assert args[0] == "-m" and not any(a.startswith("hydra.") for a in args)
    result = run_app("train.py", *args, *FAST, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    with open(sweep_dir / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(args[1].split("=")[1].split(",")) and {r["status"] for r in rows} == {"ok"}


def test_new_run_dir_never_returns_an_existing_directory(tmp_path):
    base = str(tmp_path / "runs" / "2026-01-01_00-00-00")
    made = [new_run_dir(base) for _ in range(3)]
    assert made == [base, base + "_1", base + "_2"] and all(Path(p).is_dir() for p in made)


def test_a_config_printed_names_the_run_directory_it_would_create_and_creates_none(tmp_path):
    base = str(tmp_path / "runs" / "2026-01-01_00-00-00")
    with run_dirs_named_not_created(True):
        assert new_run_dir(base) == base and not (tmp_path / "runs").exists()
        Path(base).mkdir(parents=True)
        assert new_run_dir(base) == base + "_1" and not Path(base + "_1").exists()
    assert new_run_dir(base) == base + "_1" and Path(base + "_1").is_dir()  # a run after it creates its own


@pytest.mark.integration
@pytest.mark.parametrize("flags", [["--cfg", "all", "--resolve"], ["--cfg", "all", "-p", "hydra.run.dir"]])
def test_printing_the_config_leaves_no_run_directory_behind(tmp_path, flags):
    result = run_app("train.py", *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "./logs/train/runs/" in result.stdout
    assert not (tmp_path / "logs").exists()


@pytest.mark.integration
def test_two_runs_started_in_the_same_second_get_two_directories(tmp_path):
    import os

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    start = time.time()
    runs = [subprocess.Popen([sys.executable, str(ROOT / "train.py"), *FAST], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert all(run.returncode == 0 for run in runs), [err[-2000:] for _, err in outputs]
    dirs = sorted((tmp_path / "logs" / "train" / "runs").iterdir())
    assert len(dirs) == 2, dirs
    for run_dir in dirs:
        with open(run_dir / "csv" / "metrics.csv") as f:
            assert len(list(csv.DictReader(f))) == 3  # its own rows (held-out at step 0, step 1, final held-out)
    assert time.time() - start < 300


@pytest.mark.integration
def test_a_used_run_directory_is_refused_unless_resumed_or_overwritten(tmp_path):
    run_dir = tmp_path / "run"
    first = run_app("train.py", f"hydra.run.dir={run_dir}", *FAST, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert not [p for p in run_dir.rglob("*.log") if p.stat().st_size == 0]  # no empty train.log
    metrics = (run_dir / "csv" / "metrics.csv").read_text()
    config = (run_dir / ".hydra" / "config.yaml").read_text()

    again = run_app("train.py", f"hydra.run.dir={run_dir}", *FAST, "seed=1", cwd=tmp_path)
    assert "already holds another run's files" in one_line_error(again)
    assert (run_dir / "csv" / "metrics.csv").read_text() == metrics
    assert (run_dir / ".hydra" / "config.yaml").read_text() == config  # refused before Hydra wrote anything

    resumed = run_app("train.py", f"hydra.run.dir={run_dir}", "ckpt_path=last", *FAST[1:], "steps=2", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    with open(run_dir / "csv" / "metrics.csv") as f:
        assert [r["step"] for r in csv.DictReader(f) if r["episode"]] == ["0", "1"]  # both steps, one file
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["last.ckpt"]

    overwritten = run_app("train.py", f"hydra.run.dir={run_dir}", "overwrite_run_dir=true", *FAST, cwd=tmp_path)
    assert overwritten.returncode == 0, overwritten.stderr[-3000:]
    with open(run_dir / "csv" / "metrics.csv") as f:
        assert [r["step"] for r in csv.DictReader(f) if r["episode"]] == ["0"]


@pytest.mark.integration
def test_ckpt_path_last_without_a_checkpoint_is_an_error_not_a_fresh_run(tmp_path):
    result = run_app("train.py", "ckpt_path=last", *FAST, cwd=tmp_path)
    assert "ckpt_path=last" in one_line_error(result) and "does not exist" in result.stderr
    assert "hydra.run.dir=<the run's directory>" in result.stderr  # no run here to name

    trained = run_app("train.py", *FAST, cwd=tmp_path)  # a run in the default directory, then ckpt_path=last again
    assert trained.returncode == 0, trained.stderr[-3000:]
    run_dir = next(p.parents[1] for p in (tmp_path / "logs").rglob("last.ckpt"))
    line = one_line_error(run_app("train.py", "ckpt_path=last", *FAST[1:], "steps=2", cwd=tmp_path))
    assert f"to resume the latest run beside it, add hydra.run.dir={run_dir} (or give ckpt_path=" in line, line
    resumed = run_app("train.py", "ckpt_path=last", *FAST[1:], "steps=2", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    with open(run_dir / "csv" / "metrics.csv") as f:
        assert [r["step"] for r in csv.DictReader(f) if r["episode"]] == ["0", "1"]
    # evaluate.py takes a checkpoint's path: `last` is answered with the latest training run's
    line = one_line_error(run_app("evaluate.py", "ckpt_path=last", cwd=tmp_path))
    assert line == (f"error: ckpt_path=last: evaluate.py takes the path of a checkpoint; the latest training run's is "
                    f"ckpt_path=logs/train/runs/{run_dir.name}/checkpoints/last.ckpt"), line


@pytest.mark.integration
def test_overwrite_run_dir_never_deletes_a_directory_no_run_wrote(tmp_path):
    (tmp_path / "my_prompts.jsonl").write_text('{"prompt": "mine"}\n')
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "reward.py").write_text("def reward(): ...\n")
    result = run_app("train.py", "hydra.run.dir=.", "overwrite_run_dir=true", *FAST, cwd=tmp_path)
    assert "was not written by a run (no .hydra/ in it)" in one_line_error(result)
    assert (tmp_path / "my_prompts.jsonl").exists() and (tmp_path / "src" / "reward.py").exists()


def claimed(tmp_path, capsys, **settings):
    """What claiming tmp_path as hydra.run.dir with these settings says (None: claimed), its lock released."""
    from omegaconf import OmegaConf

    from lit_rlhf.cli import run_dirs

    cfg = OmegaConf.create({"hydra": {"run": {"dir": str(tmp_path)}}, "ckpt_path": None, "overwrite_run_dir": False,
                            **settings})
    try:
        run_dirs.claim_run_dir(cfg, "hydra.run.dir")
    except SystemExit as stop:
        assert stop.code == 2
        return capsys.readouterr().err.strip()
    finally:
        while run_dirs._held_locks:
            run_dirs._held_locks.pop().close()
    return None


def your_files(directory):
    (directory / "my_notes.txt").write_text("mine")
    (directory / "src").mkdir()
    (directory / "src" / "reward.py").write_text("def reward(): ...\n")
    return sorted(p.relative_to(directory) for p in directory.rglob("*"))


def test_overwrite_run_dir_deletes_a_previous_runs_files_only_where_it_holds_nothing_else(tmp_path, capsys):
    """A directory a run once wrote (.hydra/) that also holds your files (a run resumed into your folder) is
    refused whole: nothing is deleted, and no lock file is left behind."""
    (tmp_path / ".hydra").mkdir()
    (tmp_path / "csv").mkdir()
    before = your_files(tmp_path)
    assert claimed(tmp_path, capsys, overwrite_run_dir=True) == (
        f"error: overwrite_run_dir=true, but hydra.run.dir={tmp_path} holds 'my_notes.txt' (and 1 more), which no run "
        "writes, and only a previous run's own files are deleted; move it out, or pick a new or empty directory.")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    for name in ("my_notes.txt", "src/reward.py", "src"):
        (tmp_path / name).unlink() if name.endswith((".txt", ".py")) else (tmp_path / name).rmdir()
    for written in ("result.json", "train.log", "curves.png"):
        (tmp_path / written).write_text("")
    (tmp_path / "0").mkdir()
    assert claimed(tmp_path, capsys, overwrite_run_dir=True) is None
    assert [p.name for p in tmp_path.iterdir()] == [".run.lock"]


def test_an_overwrite_run_dir_that_is_no_bool_deletes_nothing(tmp_path, capsys):
    """overwrite_run_dir=ture (a typo) was taken as true: a previous run's files were deleted."""
    (tmp_path / ".hydra").mkdir()
    (tmp_path / "result.json").write_text("{}")
    line = claimed(tmp_path, capsys, overwrite_run_dir="ture")
    assert line == "error: overwrite_run_dir='ture' must be true or false."
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hydra", "result.json"]


def test_ckpt_path_last_without_a_checkpoint_writes_nothing_into_a_directory_of_files(tmp_path, capsys):
    """Taken for a resume, it let Hydra write .hydra/ into your folder, which overwrite_run_dir=true then took for a
    run's directory."""
    before = your_files(tmp_path)
    assert claimed(tmp_path, capsys, ckpt_path="last") == (
        f"error: ckpt_path=last: {tmp_path}/checkpoints/last.ckpt does not exist; pass hydra.run.dir=<the run's "
        "directory> with ckpt_path=last, or ckpt_path=<path to a .ckpt>.")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert claimed(tmp_path, capsys, ckpt_path=str(tmp_path / "checkpoints" / "step2.ckpt")) == (
        f"error: ckpt_path='{tmp_path}/checkpoints/step2.ckpt' is not a file; give a .ckpt written by lit_rlhf (e.g. "
        "<run dir>/checkpoints/last.ckpt).")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_text("")
    assert claimed(tmp_path, capsys, ckpt_path="last") is None


@pytest.mark.integration
def test_a_second_process_on_a_run_directory_still_in_use_is_refused(tmp_path):
    import os

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    running = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "hydra.run.dir=run", *FAST, "steps=1000",
                                "callbacks.model_checkpoint.every_n_train_steps=1"], cwd=tmp_path, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (tmp_path / "run" / "checkpoints" / "last.ckpt").exists() and time.time() < deadline:
            time.sleep(0.5)
        assert running.poll() is None, "the first run ended before the test could start the second"
        second = run_app("train.py", "hydra.run.dir=run", "ckpt_path=last", *FAST, "steps=1000", cwd=tmp_path)
        assert "is in use by a run still going (pid" in one_line_error(second)
    finally:
        running.kill()
        running.wait()
    import torch

    done = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)["rlhf_state"]["rl_step"]
    resumed = run_app("train.py", "hydra.run.dir=run", "ckpt_path=last", *FAST[1:], f"steps={done + 1}",
                      cwd=tmp_path)  # the lock went with the killed process
    assert resumed.returncode == 0, resumed.stderr[-3000:]


@pytest.mark.integration
def test_a_resume_from_an_earlier_checkpoint_of_its_own_directory_replaces_the_later_ones(tmp_path):
    every_step = ["callbacks.model_checkpoint.every_n_train_steps=1", "callbacks.model_checkpoint.save_top_k=-1"]
    first = run_app("train.py", "hydra.run.dir=run", *FAST[1:], "steps=2", *every_step, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    checkpoints = tmp_path / "run" / "checkpoints"
    names = sorted(p.name for p in checkpoints.iterdir())
    earlier, later = sorted(n for n in names if n != "last.ckpt")
    before = {name: (checkpoints / name).stat().st_mtime_ns for name in names}
    resumed = run_app("train.py", "hydra.run.dir=run", f"ckpt_path=run/checkpoints/{earlier}", *FAST[1:],
                      "steps=2", *every_step, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(p.name for p in checkpoints.iterdir()) == names  # no last-v1.ckpt, no step2-v1.ckpt
    assert all((checkpoints / name).stat().st_mtime_ns > before[name] for name in ("last.ckpt", later))


@pytest.mark.integration
def test_a_run_that_fails_its_checks_leaves_no_run_directory_but_never_removes_a_run(tmp_path):
    from tests.apps import run_app
    from tests.helpers import FAST, one_line_error

    result = run_app("train.py", *FAST, "algo.kl_coef=-1", cwd=tmp_path)
    assert one_line_error(result) == "error: algo.kl_coef=-1.0 must be >= 0."
    assert not (tmp_path / "logs").exists()  # nor the folders created for it (logs/train/runs/)
    run_dir = tmp_path / "run"
    assert run_app("train.py", *FAST, f"hydra.run.dir={run_dir}", cwd=tmp_path).returncode == 0
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    failed = run_app("train.py", *FAST, f"hydra.run.dir={run_dir}", f"ckpt_path={checkpoint}", "algo.kl_coef=-1",
                     cwd=tmp_path)
    assert one_line_error(failed).startswith("error: algo.kl_coef=-1.0")
    assert checkpoint.is_file() and (run_dir / "csv").is_dir()  # the run's files stay


def test_a_removed_run_directory_takes_the_log_file_opened_in_it_along(tmp_path, capsys):
    """Hydra's file handler opens <run dir>/<app>.log at its first line (delay: true). A line logged after a refused or
    stopped run's directory was removed (torch's cache statistics at the process's exit, once a Ctrl-C cut its import
    short) was a FileNotFoundError's traceback under "--- Logging error ---"."""
    run_dir = tmp_path / "runs" / "2026-01-01_00-00-00"
    run_dir.mkdir(parents=True)
    handler = logging.FileHandler(run_dir / "train.log", delay=True)
    logging.getLogger().addHandler(handler)
    try:
        remove_unused_run_dir(run_dir)
        logging.getLogger("a_library").warning("a line logged at exit")
    finally:
        logging.getLogger().removeHandler(handler)
    assert not run_dir.exists()
    assert "Logging error" not in capsys.readouterr().err


def test_rank_zero_of_a_multi_process_launch_accepts_the_start_files_its_other_ranks_wrote(tmp_path, monkeypatch,
                                                                                         capsys):
    """torchrun / SLURM: another node's Hydra may write .hydra/ into the shared run directory before rank zero's
    guard looks; that is this run, not another one. A directory holding a run's records is still refused."""
    from omegaconf import OmegaConf

    from lit_rlhf.cli import run_dirs

    def claim(cfg):  # as a fresh process would: no lock held from the call before
        while run_dirs._held_locks:
            run_dirs._held_locks.pop().close()
        run_dirs.claim_run_dir(cfg, "hydra.run.dir")

    run_dir = tmp_path / "shared"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 0\n")
    cfg = OmegaConf.create({"hydra": {"run": {"dir": str(run_dir)}}})
    for name in ("LOCAL_RANK", "RANK", "NODE_RANK", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    claim(cfg)  # accepted
    (run_dir / "csv").mkdir()
    (run_dir / "csv" / "metrics.csv").write_text("step\n1\n")
    with pytest.raises(SystemExit):
        claim(cfg)
    monkeypatch.setenv("WORLD_SIZE", "1")
    (run_dir / "csv" / "metrics.csv").unlink()
    with pytest.raises(SystemExit):  # one process: .hydra/ there is another run's, killed before it wrote anything
        claim(cfg)
    first, second = capsys.readouterr().err.splitlines()
    assert "already holds another run's files" in first
    assert second == (f"error: hydra.run.dir={run_dir} holds only the start files of a run that ended before it "
                      f"wrote anything; pass overwrite_run_dir=true to start this run in it, or pick a new directory.")
    claim(OmegaConf.merge(cfg, {"overwrite_run_dir": True}))  # as it says
    assert [p.name for p in run_dir.iterdir()] == [".run.lock"]


@pytest.mark.integration
def test_a_checkpoint_or_log_folder_holding_another_runs_files_is_refused_and_theirs_stay(tmp_path):
    """callbacks.model_checkpoint.dirpath=<another run's checkpoints> replaced its last.ckpt, whose resume command
    then resumed this run; logger.csv.save_dir=<another run> added this run's rows to its metrics.csv."""
    first = run_app("train.py", "hydra.run.dir=first", *FAST, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    kept = {path: path.read_bytes() for path in (tmp_path / "first").rglob("*") if path.is_file()}
    for setting, folder, held in (("callbacks.model_checkpoint.dirpath=first/checkpoints", "", "'last.ckpt'"),
                                  ("logger.csv.save_dir=first", ": first/csv", "'hparams.yaml' and 1 more")):
        refused = run_app("train.py", *FAST, setting, cwd=tmp_path)
        key, value = setting.split("=")
        assert one_line_error(refused).startswith(
            f"error: {key}={value!r}{folder} is outside the run directory and holds files already ({held}), which "
            f"this run would write over or add to; give a new or empty directory, leave {key} out"), refused.stderr
        assert not (tmp_path / "logs").exists()  # the refused run's directory is removed
    assert {path: path.read_bytes() for path in (tmp_path / "first").rglob("*") if path.is_file()} == kept


def folder_settings(tmp_path, node: str, **settings):
    """A composed config's run directory, ckpt_path and one callback's or logger's settings."""
    from omegaconf import OmegaConf

    group, name = node.split(".")
    return OmegaConf.create({"paths": {"output_dir": str(tmp_path / "run")}, "ckpt_path": None,
                             group: {name: {"_target_": "x.Y", **settings}}})


def test_an_output_folder_outside_the_run_is_refused_only_where_it_holds_files_and_the_run_is_no_resume(tmp_path):
    from lit_rlhf.cli.output_folders import check_folder_of_no_other_run
    from lit_rlhf.errors import ConfigError

    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "last.ckpt").write_bytes(b"this run's own")
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "last.ckpt").write_bytes(b"another run's")
    for allowed in ("run/checkpoints", "run", "new", "empty"):  # its own folders, a new one, an empty one
        check_folder_of_no_other_run(folder_settings(tmp_path, "callbacks.c", dirpath=str(tmp_path / allowed)),
                                     "callbacks.c", "dirpath")
    settings = folder_settings(tmp_path, "callbacks.c", dirpath=str(tmp_path / "other"))
    with pytest.raises(ConfigError, match=re.escape(f"callbacks.c.dirpath='{tmp_path / 'other'}' is outside the run "
                                                    f"directory and holds files already ('last.ckpt'), ")):
        check_folder_of_no_other_run(settings, "callbacks.c", "dirpath")
    settings.ckpt_path = str(tmp_path / "other" / "last.ckpt")  # a resume writes on into the folders it wrote
    check_folder_of_no_other_run(settings, "callbacks.c", "dirpath")


@pytest.mark.parametrize("version, written", [("", "logs"), (3, "logs/version_3"), ("mine", "logs/mine"), (None, None)])
def test_a_loggers_folder_is_its_save_dir_name_and_version_and_a_null_version_is_always_new(version, written, tmp_path):
    from lit_rlhf.cli.output_folders import check_folder_of_no_other_run
    from lit_rlhf.errors import ConfigError

    for folder in ("logs", "logs/version_3", "logs/mine"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "metrics.csv").write_text("step\n0\n")
    settings = folder_settings(tmp_path, "logger.csv", save_dir=str(tmp_path), name="logs", version=version)
    if written is None:  # Lightning's next version_N: a new folder
        check_folder_of_no_other_run(settings, "logger.csv", "save_dir")
        return
    with pytest.raises(ConfigError) as refused:
        check_folder_of_no_other_run(settings, "logger.csv", "save_dir")
    assert str(refused.value).startswith(f"logger.csv.save_dir='{tmp_path}': {tmp_path / written} is outside the run "
                                         f"directory and holds files already ('metrics.csv'"), str(refused.value)
    assert "logger.csv.version=null (a new version_N folder for each run)" in str(refused.value)


def test_in_a_sweep_the_line_shows_a_folder_for_each_job(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from lit_rlhf.cli.output_folders import check_folder_of_no_other_run
    from lit_rlhf.errors import ConfigError

    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "last.ckpt").write_bytes(b"job 0's")
    monkeypatch.setattr(HydraConfig, "initialized", staticmethod(lambda: True))
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: SimpleNamespace(mode=RunMode.MULTIRUN)))
    settings = folder_settings(tmp_path, "callbacks.c", dirpath=str(tmp_path / "ck"))
    with pytest.raises(ConfigError) as refused:
        check_folder_of_no_other_run(settings, "callbacks.c", "dirpath")
    assert f"(in a sweep, a folder for each job: 'callbacks.c.dirpath={tmp_path / 'ck'}/${{hydra:job.num}}')" in \
        str(refused.value)
