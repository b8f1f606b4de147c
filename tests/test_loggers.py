"""ResumingCSVLogger: a resumed run's metrics.csv holds every row once, the earlier run's included."""

import csv

import pytest

from lit_rlhf.loggers import ResumingCSVLogger

TRAIN, EVAL = "loss", "eval/scores"  # a metric of an RL step's row; of a held-out evaluation's
START = "start"  # the starting policy's evaluation: EVAL at step 0, logged beside Lightning (no epoch)


def resumed_rows(tmp_path, previous: list[tuple[int, str]] | None, logged: list[tuple[int, str]]) -> list[tuple]:
    """(step, "train", "eval" or "start", run) of each row of metrics.csv after a run that wrote `previous` (step,
    metric; None: the metrics.csv already there) is resumed in the same directory and logs `logged`; the metric's
    value says which run wrote the row (0: the first, 1: the resumed one)."""
    def row(metric, value):
        return {EVAL: value} if metric == START else {metric: value, "epoch": 0}

    def kind(row):
        return "train" if row[TRAIN] else "eval" if row["epoch"] else "start"

    if previous is not None:
        with open(tmp_path / "metrics.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["epoch", EVAL, TRAIN, "step"])
            writer.writeheader()
            writer.writerows({**row(metric, 0), "step": step} for step, metric in previous)
    logger = ResumingCSVLogger(str(tmp_path), name="", version="")
    for step, metric in logged:
        logger.log_metrics(row(metric, 1), step=step)  # Lightning saves after each row it logs
        logger.save()
    with open(tmp_path / "metrics.csv") as f:
        return [(int(row["step"]), kind(row), int(float(row[EVAL] or row[TRAIN]))) for row in csv.DictReader(f)]


@pytest.mark.parametrize("case", ["within a step", "in the evaluation after a step", "in the evaluation after step 1",
                                  "before step 1"])
def test_a_resumed_run_keeps_the_rows_it_does_not_log_again(case, tmp_path):
    if case == "within a step":  # the checkpoint holds step 1 (index 0); step 2 (index 1) runs again
        previous = [(0, START), (0, TRAIN)]
        logged = [(1, TRAIN), (1, EVAL), (2, TRAIN)]
        expected = [(0, "start", 0), (0, "train", 0), (1, "train", 1), (1, "eval", 1), (2, "train", 1)]
    elif case == "in the evaluation after step 1":  # the evaluation after step 1 shares index 0 with the starting
        # policy's: it alone is logged again (a run stopped there by max_time and resumed lost all three rows)
        previous = [(0, START), (0, TRAIN), (0, EVAL)]
        logged = [(0, EVAL), (1, TRAIN)]
        expected = [(0, "start", 0), (0, "train", 0), (0, "eval", 1), (1, "train", 1)]
    elif case == "before step 1":  # a checkpoint of no step (a run interrupted in its first): everything runs again
        previous = [(0, START), (0, TRAIN), (0, EVAL)]
        logged = [(0, START), (0, TRAIN)]
        expected = [(0, "start", 1), (0, "train", 1)]
    else:  # the checkpoint holds step 2, written in the evaluation after it, which the resumed run runs again first:
        # step 2's training row (index 1) stays (it was dropped: the resumed run's first row has its index)
        previous = [(0, START), (0, TRAIN), (1, TRAIN)]
        logged = [(1, EVAL), (2, TRAIN)]
        expected = [(0, "start", 0), (0, "train", 0), (1, "train", 0), (1, "eval", 1), (2, "train", 1)]
    assert resumed_rows(tmp_path, previous, logged) == expected


def test_the_rows_a_resumed_run_logs_again_are_replaced(tmp_path):
    # a checkpoint from before rows the first run still wrote (last.ckpt at step 1, then a crash after step 2's
    # evaluation): the resumed run writes step 2's rows again, and they replace the first run's
    previous = [(0, TRAIN), (1, TRAIN), (1, EVAL), (2, TRAIN)]
    logged = [(1, TRAIN), (1, EVAL), (2, TRAIN)]
    assert resumed_rows(tmp_path, previous, logged) == [(0, "train", 0), (1, "train", 1), (1, "eval", 1),
                                                        (2, "train", 1)]


@pytest.mark.parametrize("tail, expected", [
    (b"\xff\xfe not text\n", r"metrics\.csv cannot be read as the run's CSV metrics \('utf-8' codec can't decode"),
    (b"garbage,\x1b[31m\n", r"metrics\.csv, line 4: no step \(the resumed run's rows are placed by their step\)"),
    (b"0,1,,two\n", r"metrics\.csv, line 4: step='two', not a whole number"),
])
def test_a_metrics_file_the_logger_cannot_read_is_one_line_before_the_fit_and_left_as_it_is(tail, expected, tmp_path):
    """A resumed run's metrics.csv is the run's own file, which may be edited or damaged; unchecked, it stops the run
    with a UnicodeDecodeError before the fit, or with a ValueError at the first row the resumed run saves."""
    from lit_rlhf.errors import ConfigError

    resumed_rows(tmp_path, [(0, TRAIN), (1, TRAIN)], [])
    with open(tmp_path / "metrics.csv", "ab") as f:
        f.write(tail)
    before = (tmp_path / "metrics.csv").read_bytes()
    logger = ResumingCSVLogger(str(tmp_path), name="", version="")
    with pytest.raises(ConfigError, match=expected) as refused:
        logger.log_hyperparams({"seed": 0})  # what the apps do first with their loggers
    assert "\x1b" not in str(refused.value) and str(refused.value).endswith("or mend it, and resume again.")
    assert (tmp_path / "metrics.csv").read_bytes() == before


@pytest.mark.parametrize(("earlier_run", "mode", "expected_id"), [
    ("run-20261203_044341-abc123", "online", "abc123"),  # the same W&B run goes on
    ("offline-run-20261203_044341-abc123", "online", None),  # wandb resumes no offline run
    ("run-20261203_044341-abc123", "offline", None),  # offline runs sharing an id replace one another when synced
    (None, "online", None),  # a new run directory: a new W&B run
])
def test_logger_wandb_resuming_in_its_run_directory_continues_the_online_run_it_started(earlier_run, mode, expected_id,
                                                                                         tmp_path, monkeypatch):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from lit_rlhf.cli.resolvers import register_resolvers
    from tests.helpers import ROOT

    monkeypatch.setenv("WANDB_MODE", mode)
    if earlier_run is not None:  # as wandb leaves a run directory
        (tmp_path / "wandb" / earlier_run).mkdir(parents=True)
        (tmp_path / "wandb" / "latest-run").symlink_to(earlier_run)
    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=["logger=wandb", f"paths.output_dir={tmp_path}"])
    logger = instantiate(cfg.logger.wandb)  # wandb.init runs at the first log: nothing is sent here
    assert logger._wandb_init["id"] == expected_id and logger._wandb_init["resume"] == "allow"


@pytest.mark.parametrize(("raised", "expected"), [
    ("CommError", "logger=wandb: W&B could not reach its server (Failed to get resume status for run x1: context "
                  "deadline exceeded); check the network (and WANDB_BASE_URL), or log offline with WANDB_MODE=offline"),
    ("AuthenticationError", "logger=wandb: the W&B server refused the API key (Failed to get resume status for run "
                            "x1: context deadline exceeded); run `wandb login` or set WANDB_API_KEY"),
])
def test_a_wandb_server_out_of_reach_is_one_line_not_wandbs_trace(raised, expected, tmp_path, monkeypatch):
    """What wandb.init raises when WANDB_MODE=online and its server cannot be reached (here after its init timeout,
    the first line of its message as measured) or refuses the key."""
    import wandb
    from wandb import errors

    from lit_rlhf.errors import UnavailableError
    from lit_rlhf.loggers import WandbLogger

    def unreachable(**settings):
        raise getattr(errors, raised)("Failed to get resume status for run x1: context deadline exceeded\nwhile "
                                      "retrying: Post \"https://api.wandb.ai/graphql\": dial tcp: no such host")

    monkeypatch.setattr(wandb, "init", unreachable)
    monkeypatch.setattr("lit_rlhf.loggers.reachable", lambda url: True)  # a server that answers the probe
    with pytest.raises(UnavailableError) as err:
        WandbLogger(save_dir=str(tmp_path), project="p").log_hyperparams({"lr": 1e-3})
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)


def test_a_wandb_server_that_cannot_be_reached_is_one_line_before_wandb_init_waits_for_it(tmp_path, monkeypatch):
    """wandb.init waited its init_timeout (90 s; 110 s in all, measured) before the line above; a connection probe
    answers at once."""
    import wandb

    from lit_rlhf.errors import UnavailableError
    from lit_rlhf.loggers import WandbLogger

    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setattr(wandb, "init", lambda **settings: pytest.fail("wandb.init was called"))
    with pytest.raises(UnavailableError) as err:
        WandbLogger(save_dir=str(tmp_path), project="p").log_hyperparams({"lr": 1e-3})
    assert str(err.value) == ("logger=wandb: W&B could not reach its server (http://127.0.0.1:9 cannot be reached); "
                              "check the network (and WANDB_BASE_URL), or log offline with WANDB_MODE=offline and "
                              "upload later with `wandb sync`.")


def test_a_rewrite_that_fails_midway_leaves_the_rows_already_written(tmp_path, monkeypatch):
    """A metric logged for the first time rewrites every row under the new header; a kill or a full disk midway left
    a truncated metrics.csv (Lightning writes over it in place)."""
    logger = ResumingCSVLogger(str(tmp_path), name="", version="")
    for step in range(3):
        logger.log_metrics({TRAIN: float(step)}, step=step)
        logger.save()
    before = (tmp_path / "metrics.csv").read_text()

    def disk_full(self, rows):
        self.writerow(next(iter(rows)))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(csv.DictWriter, "writerows", disk_full)
    logger.log_metrics({TRAIN: 3.0, EVAL: 0.5}, step=3)  # a new column
    with pytest.raises(OSError, match="No space left") as raised:
        logger.save()
    assert raised.value.filename == str(tmp_path / "metrics.csv")  # the run's line names it: "no space left writing"
    assert (tmp_path / "metrics.csv").read_text() == before


def test_a_last_row_cut_short_is_dropped_with_a_warning_and_the_resumed_rows_follow_the_whole_ones(tmp_path):
    """A kill or a full disk in the middle of a row left a metrics.csv whose last line has no end; the resume was
    refused ("line 4: no step ... mend it") until the file was mended by hand."""
    resumed_rows(tmp_path, [(0, START), (0, TRAIN), (1, TRAIN)], [])
    with open(tmp_path / "metrics.csv", "ab") as f:
        f.write(b"0,,1.5")  # step 2's row, cut before its step column and line end
    with pytest.warns(UserWarning, match=r"metrics\.csv: its last row was cut short \(the earlier run ended while "
                                         r"writing it\) and is dropped"):
        rows = resumed_rows(tmp_path, None, [(2, TRAIN)])
    assert rows == [(0, "start", 0), (0, "train", 0), (1, "train", 0), (2, "train", 1)]

