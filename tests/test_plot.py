"""python -m lit_rlhf.plot on the runs of every app: an RL run's curves by episode, a fit on a file's (train_sft.py,
train_dpo.py, train_kto.py, train_reward_model.py: no episode, none of the RL curves) by step; before, those were a
blank PNG."""

import pytest

from lit_rlhf.plot import curve_names, read_metrics, x_axis
from tests.apps import run_app

DPO_ROWS = """entropy,epoch,eval/loss,eval/rewards/margins,loss,rewards/margins,step
1.1,0,,,0.69,0.0,0
1.2,0,,,0.68,0.1,1
,0,0.67,0.2,,,1
"""


def test_a_fit_on_a_file_is_drawn_by_step_with_its_losses_and_margins(tmp_path):
    (tmp_path / "metrics.csv").write_text(DPO_ROWS)
    series = read_metrics(tmp_path / "metrics.csv")
    assert x_axis(tmp_path / "metrics.csv") == "step"
    assert curve_names(series) == ["loss", "eval/loss", "rewards/margins", "eval/rewards/margins"]
    assert series["loss"] == ([0.0, 1.0], [0.69, 0.68]) and series["eval/loss"] == ([1.0], [0.67])


def test_an_rl_run_is_drawn_by_episode_and_a_fit_s_names_stay_out(tmp_path):
    (tmp_path / "metrics.csv").write_text("episode,objective/scores,loss,step\n32,0.1,0.5,0\n64,0.2,0.4,1\n")
    assert x_axis(tmp_path / "metrics.csv") == "episode"
    assert curve_names(read_metrics(tmp_path / "metrics.csv")) == ["objective/scores"]


@pytest.mark.integration
def test_the_command_refuses_a_log_with_nothing_to_draw_and_writes_into_a_folder_given_as_out(tmp_path):
    run = tmp_path / "run"
    (run / "csv").mkdir(parents=True)
    (run / "csv" / "metrics.csv").write_text("step,foo\n0,1\n")
    result = run_app("lit_rlhf.plot", str(run), cwd=tmp_path, module=True)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith(
        f"error: {run / 'csv' / 'metrics.csv'} holds none of the curves this draws")
    (run / "csv" / "metrics.csv").write_text(DPO_ROWS)
    (tmp_path / "figures").mkdir()
    result = run_app("lit_rlhf.plot", str(run), "--out", str(tmp_path / "figures"), cwd=tmp_path, module=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "figures" / "curves.png").stat().st_size > 10_000  # panels drawn, not a blank page
    assert not (tmp_path / "figures.png").exists()


@pytest.mark.integration
def test_an_out_typed_empty_not_an_image_or_not_writable_is_one_line_and_the_file_written_is_the_one_named(tmp_path):
    """--out= drew into the working directory's curves.png; --out x.txt and --out /proc/x.png ended in matplotlib's and
    the OS's lines, which named no option; --out plot printed "plot" and wrote plot.png."""
    run = tmp_path / "run"
    (run / "csv").mkdir(parents=True)
    (run / "csv" / "metrics.csv").write_text(DPO_ROWS)
    lines = {}
    for out in ("", "x.txt", "/proc/no_such/x.png"):
        result = run_app("lit_rlhf.plot", str(run), f"--out={out}", cwd=tmp_path, module=True)
        assert result.returncode == 2, result.stderr
        lines[out] = result.stderr.strip().splitlines()[-1]
    assert lines[""] == ("error: --out='' is empty (a shell variable that is not set?); give a file (e.g. curves.png) "
                         "or a folder, or leave --out out (RUN_DIR/curves.png).")
    assert lines["x.txt"].startswith("error: --out='x.txt': .txt is not an image format the plot is written in (")
    assert lines["/proc/no_such/x.png"].startswith("error: cannot write --out='/proc/no_such/x.png' (")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    result = run_app("lit_rlhf.plot", str(run), "--out", "plot", cwd=tmp_path, module=True)
    assert (result.returncode, result.stdout.strip()) == (0, "plot.png") and (tmp_path / "plot.png").is_file()
