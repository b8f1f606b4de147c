"""A full disk and a read-only target, on real filesystems (small tmpfs mounts; skipped where this process
may not mount): one line naming the path, nothing half-written left, the checkpoints already written intact."""

import subprocess
import uuid

import pytest
import torch

from tests.apps import run_app
from tests.helpers import FAST, one_line_error

pytestmark = pytest.mark.integration  # runs a Trainer or an app


def mount_tmpfs(path, options: str):
    path.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")


@pytest.fixture
def full_disk(tmp_path):
    disk = tmp_path / "full"
    mount_tmpfs(disk, "size=2m")
    with open(disk / "filler", "wb") as f:  # leave ~100 KiB: a checkpoint or a model does not fit
        f.write(b"\0" * (2 * 2**20 - 100 * 2**10))
    yield disk
    subprocess.run(["umount", str(disk)])


@pytest.fixture
def read_only_disk(tmp_path):
    disk = tmp_path / "read_only"
    mount_tmpfs(disk, "size=1m,ro")
    yield disk
    subprocess.run(["umount", str(disk)])


def export(ckpt, out, cwd):
    return run_app("lit_rlhf.export", str(ckpt), str(out), cwd=cwd, module=True)


def test_checkpoints_on_a_full_disk_are_one_line_naming_the_file(full_disk, tmp_path):
    result = run_app("train.py", *FAST, f"callbacks.model_checkpoint.dirpath={full_disk / 'checkpoints'}",
                     cwd=tmp_path)
    line = one_line_error(result)
    assert line.startswith(f"error: no space left writing {full_disk / 'checkpoints' / 'last.ckpt'}"), line
    assert not [p for p in (full_disk / "checkpoints").iterdir() if p.name.startswith(".last.ckpt.partial")]


def test_a_fit_apps_checkpoint_on_a_full_disk_is_one_line_and_leaves_no_truncated_file(full_disk, tmp_path):
    """train_sft.py (train_dpo.py, train_kto.py, train_reward_model.py: the same module base) wrote last.ckpt through
    Lightning's temporary file in $TMPDIR moved over it: a truncated last.ckpt, and a line naming the temporary file."""
    result = run_app("train_sft.py", f"callbacks.model_checkpoint.dirpath={full_disk / 'checkpoints'}", cwd=tmp_path)
    line = one_line_error(result)
    assert line.startswith(f"error: no space left writing {full_disk / 'checkpoints' / 'last.ckpt'}"), line
    assert not list((full_disk / "checkpoints").iterdir())


def test_a_disk_that_fills_up_mid_run_is_one_line_with_the_command_that_resumes_from_the_last_checkpoint(tmp_path):
    """Room for one checkpoint (1.6 MB) and not for the next one's partial file: the line names the file and gives
    the command that resumes from the complete checkpoint, as a reward server lost mid-run does."""
    disk = tmp_path / "small"
    mount_tmpfs(disk, "size=3m")
    try:
        result = run_app("train.py", *FAST, "steps=3", "callbacks.model_checkpoint.every_n_train_steps=1",
                         f"callbacks.model_checkpoint.dirpath={disk}", "hydra.run.dir=run", cwd=tmp_path)
        line = one_line_error(result)
        assert line.startswith(f"error: no space left writing {disk / 'last.ckpt'}"), line
        # step 1's checkpoint fits, step 2's does not: step 2 had finished, and the resume runs step 3
        assert "Stopped after RL step 2; resume from the last checkpoint: python " in line, line
        assert line.endswith(f"hydra.run.dir={tmp_path / 'run'} ckpt_path={disk / 'last.ckpt'}"), line
        assert torch.load(disk / "last.ckpt", weights_only=True)["global_step"] > 0  # complete, of an earlier step
    finally:
        subprocess.run(["umount", str(disk)])


def test_a_fit_app_whose_disk_fills_up_mid_run_gives_the_command_that_resumes_from_the_last_checkpoint(tmp_path):
    """train_sft.py's checkpoint (5.6 MB, a full fine-tune) every 10 training steps on a disk with room for one."""
    disk = tmp_path / "small"
    mount_tmpfs(disk, "size=9m")
    try:
        result = run_app("train_sft.py", f"callbacks.model_checkpoint.dirpath={disk}",
                         "+callbacks.model_checkpoint.every_n_train_steps=10", "hydra.run.dir=run", cwd=tmp_path)
        line = one_line_error(result)
        assert line.startswith(f"error: no space left writing {disk / 'last.ckpt'}"), line
        assert "Stopped after training step 20; resume from the last checkpoint: python " in line, line
        assert line.endswith(f"hydra.run.dir={tmp_path / 'run'} ckpt_path={disk / 'last.ckpt'}"), line
    finally:
        subprocess.run(["umount", str(disk)])


def test_an_export_onto_a_full_disk_is_one_line_and_leaves_no_half_model(full_disk, tmp_path):
    out = full_disk / f"model-{uuid.uuid4().hex[:6]}"
    result = run_app("train.py", *FAST, "hydra.run.dir=run", f"export_dir={out}", cwd=tmp_path)
    line = one_line_error(result)
    assert line.startswith(f"error: no space left writing {out}")
    assert line.endswith(f"Training is complete; once there is room, export its final checkpoint: python -m "
                         f"lit_rlhf.export {tmp_path / 'run' / 'checkpoints' / 'last.ckpt'} {out}"), line
    assert not out.exists() and (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
    again = export(tmp_path / "run" / "checkpoints" / "last.ckpt", out, tmp_path)
    assert one_line_error(again).startswith(f"error: no space left writing {out}") and not out.exists()


def test_a_fit_apps_save_onto_a_full_disk_gives_the_command_that_saves_it_again(full_disk, tmp_path):
    result = run_app("train_sft.py", "hydra.run.dir=run", f"save_dir={full_disk / 'policy'}", cwd=tmp_path)
    line = one_line_error(result)
    assert line.startswith(f"error: no space left writing {full_disk / 'policy'}"), line
    assert "The fit is complete; once there is room, save it again (from its final checkpoint, training nothing): " \
           "python " in line, line
    assert line.endswith(f"hydra.run.dir={tmp_path / 'run'} ckpt_path={tmp_path / 'run' / 'checkpoints' / 'last.ckpt'}")
    assert not (full_disk / "policy").exists()


def test_a_read_only_export_target_is_refused_before_training(read_only_disk, tmp_path):
    out = read_only_disk / "model"
    result = run_app("train.py", *FAST, "hydra.run.dir=run", f"export_dir={out}", cwd=tmp_path)
    assert one_line_error(result).startswith(f"error: export_dir='{out}' cannot be written ({read_only_disk} is "
                                             f"read-only)")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_full_disk_at_the_start_is_one_line_naming_the_run_directory(full_disk, tmp_path):
    with open(full_disk / "last_bytes", "wb") as f:  # fill what is left
        try:
            f.write(b"\0" * 2**20)
        except OSError:
            pass
    result = run_app("train.py", *FAST, f"paths.log_dir={full_disk / 'logs'}", cwd=tmp_path)
    line = one_line_error(result)
    assert line.startswith(f"error: cannot write into hydra.run.dir={full_disk / 'logs'}"), line
    assert line.endswith("(No space left on device); free some space or point hydra.run.dir (or paths.log_dir) at a "
                         "directory you can write to."), line


def test_a_read_only_run_directory_is_one_line_that_does_not_ask_for_space(read_only_disk, tmp_path):
    result = run_app("train.py", *FAST, f"hydra.run.dir={read_only_disk / 'run'}", cwd=tmp_path)
    line = one_line_error(result)
    assert line == (f"error: cannot write into hydra.run.dir={read_only_disk / 'run'} (Read-only file system); "
                    f"point hydra.run.dir (or paths.log_dir) at a directory you can write to."), line
