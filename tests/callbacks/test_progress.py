"""The progress bar counts RL steps done / requested (also on resume), not optimizer steps or epochs."""

import lightning as L
import pytest
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_rlhf.callbacks import RLStepsProgressBar
from tests.conftest import make_datamodule, make_ppo


def fit(rl_steps, tmp_path, ckpt_path=None, bar=None):
    bar = bar or RLStepsProgressBar(only_on_terminal=False)  # pytest's stdout is not a terminal
    module = make_ppo(num_ppo_epochs=2, response_length=8)  # 2 optimizer steps per RL step
    trainer = L.Trainer(max_steps=rl_steps * 2, logger=False, enable_model_summary=False, limit_val_batches=0,
                        accelerator="cpu", callbacks=[bar, ModelCheckpoint(dirpath=tmp_path, save_last=True)])
    trainer.fit(module, make_datamodule(), ckpt_path=ckpt_path)
    return bar.progress.tasks[bar.train_progress_bar_id] if bar.progress is not None else None


@pytest.mark.integration
def test_the_bar_counts_rl_steps_and_a_resumed_run_continues_the_count(tmp_path):
    task = fit(2, tmp_path)
    assert (task.completed, task.total) == (2, 2) and task.description.strip() == "RL steps"
    resumed = fit(3, tmp_path, ckpt_path=str(tmp_path / "last.ckpt"))
    assert (resumed.completed, resumed.total) == (3, 3)


@pytest.mark.integration
def test_the_bar_draws_nothing_when_stdout_is_not_a_terminal(tmp_path):
    """In a log file the bar would be one frame printed after the run's reports; the progress lines are there."""
    bar = RLStepsProgressBar()
    assert fit(1, tmp_path, bar=bar) is None and not bar.is_enabled


def test_tables_written_to_a_file_are_wide(monkeypatch):
    import io

    from lit_rlhf.terminal import FILE_WIDTH, plain_console

    monkeypatch.delenv("COLUMNS", raising=False)
    assert plain_console(file=io.StringIO()).width == FILE_WIDTH == 160  # Rich's own default: 80
    monkeypatch.setenv("COLUMNS", "100")
    assert plain_console(file=io.StringIO()).width == 100


@pytest.mark.integration
def test_logs_get_a_plain_progress_line_every_few_rl_steps(tmp_path):
    """`make train > train.log`: stdout is not a terminal, so the run prints progress lines as it goes."""
    from tests.apps import run_app
    from tests.helpers import FAST

    args = [a for a in FAST if not a.startswith("steps=")]
    result = run_app("train.py", *args, "steps=4", "callbacks.progress_lines.every_n_steps=2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("RL step ")]
    assert [line.split(" | ")[0] for line in lines] == ["RL step 2/4", "RL step 4/4"]
    assert all(" | episodes " in line and " | score " in line and " s/step | ETA " in line for line in lines)
    assert lines[-1].split(" | ")[1] == "episodes 64"  # 4 RL steps x 4 prompts x 4 samples


@pytest.mark.integration
def test_a_plain_trainer_gets_the_rl_step_bar_and_summary_in_place_of_lightnings_defaults():
    """Lightning's default bar counts batches of an endless stream; a RichProgressBar or RichModelSummary passed with
    settings of the user's is replaced with those settings kept; a bar of another class (or none) stays."""
    from lightning.pytorch.callbacks import RichModelSummary, RichProgressBar, TQDMProgressBar
    from lightning.pytorch.callbacks.progress.rich_progress import RichProgressBarTheme

    from lit_rlhf.callbacks import ModelSummaryTable

    def callbacks_of(**trainer_options):
        trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, limit_val_batches=0,
                            accelerator="cpu", **trainer_options)
        trainer.fit(make_ppo(response_length=4), make_datamodule())
        return {type(c): c for c in trainer.callbacks}

    defaults = callbacks_of()
    assert RLStepsProgressBar in defaults and ModelSummaryTable in defaults
    assert defaults[RLStepsProgressBar].refresh_rate == RichProgressBar().refresh_rate
    theme = RichProgressBarTheme(description="red")
    passed = callbacks_of(callbacks=[RichProgressBar(refresh_rate=3, leave=True, theme=theme,
                                                     console_kwargs={"width": 90}),
                                     RichModelSummary(max_depth=2, header_style="bold red")])
    bar, summary = passed[RLStepsProgressBar], passed[ModelSummaryTable]
    assert RichProgressBar not in passed and RichModelSummary not in passed
    assert (bar.refresh_rate, bar._leave, bar.theme, bar._console_kwargs) == (3, True, theme, {"width": 90})
    assert (summary._max_depth, summary._summarize_kwargs) == (2, {"header_style": "bold red"})
    chosen = callbacks_of(callbacks=[TQDMProgressBar()], enable_model_summary=False)
    assert TQDMProgressBar in chosen and RLStepsProgressBar not in chosen and ModelSummaryTable not in chosen
