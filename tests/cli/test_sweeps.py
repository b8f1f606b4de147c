"""Hydra multirun: grid sweeps with a summary, failing trials, Optuna, experiment presets."""

import csv
import json
import shlex
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import OmegaConf

from lit_rlhf.cli import sweeps
from lit_rlhf.cli.resolvers import register_resolvers
from lit_rlhf.cli.sweeps import (
    APP_ARGV,
    BASIC_SWEEPER,
    check_search_objective,
    config_objective,
    kl_budget_objective,
    sweep_group,
)
from lit_rlhf.cli.train import finish_wandb_run, instantiate_group, resume_command
from lit_rlhf.errors import ConfigError
from tests.apps import ROOT, run_app, run_process

# a very short run: 2 RL steps of 4 prompts, 8 new tokens, held-out metrics after the last step
SHORT = ["steps=2", "data.batch_size=4", "algo.response_length=8", "data.num_eval_prompts=4",
         "callbacks.generation_samples=null", "callbacks.training_summary=null", "callbacks.curves=null",
         "callbacks.histograms=null", "callbacks.evaluation=null"]


def multirun(tmp_path, *overrides):
    result = run_app("train.py", "-m", f"hydra.sweep.dir={tmp_path}", *SHORT, *overrides, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "summary.csv") as f:
        return result, list(csv.DictReader(f))


def test_kl_budget_penalty_hand_values():
    assert kl_budget_objective(0.8, kl=12.5, kl_budget=10, penalty=1.0) == pytest.approx(0.8 - 2.5)
    assert kl_budget_objective(0.8, kl=9.0, kl_budget=10, penalty=1.0) == 0.8
    assert kl_budget_objective(0.8, kl=30.0, kl_budget=None, penalty=1.0) == 0.8
    cfg = OmegaConf.create({"optimized_metric": "eval/rlhf_reward", "kl_budget": 10, "kl_budget_penalty": 2.0})
    assert config_objective({"eval/rlhf_reward": 0.5, "eval/kl": 11.0}, cfg) == pytest.approx(0.5 - 2.0)
    with pytest.raises(ConfigError, match="optimized_metric='eval/rlhf_reward' was not logged"):
        config_objective({"objective/kl": 1.0}, cfg)


@pytest.mark.parametrize("typed, line", [
    ({"kl_budget": "abc"}, "kl_budget='abc' must be a finite number >= 0 (null: no budget)."),  # failed after training
    ({"kl_budget": -1}, "kl_budget=-1 must be a finite number >= 0 (null: no budget)."),
    ({"kl_budget_penalty": -1}, "kl_budget_penalty=-1 must be a finite number >= 0."),  # it rewarded KL past budget
    ({"kl_budget_penalty": float("nan")}, "kl_budget_penalty=nan must be a finite number >= 0."),
])
def test_the_kl_budget_settings_are_checked_before_training(typed, line):
    from lit_rlhf.cli.checks import check_objective_named

    check_objective_named(OmegaConf.create({"kl_budget": None, "kl_budget_penalty": 0}))  # no budget; no penalty
    with pytest.raises(ConfigError) as err:
        check_objective_named(OmegaConf.create({"kl_budget": 10.0, "kl_budget_penalty": 1.0, **typed}))
    assert str(err.value) == line


@pytest.mark.integration
def test_a_2x2_grid_runs_every_combination_in_its_own_directory_and_writes_a_summary(tmp_path):
    result, rows = multirun(tmp_path, "algo.kl_coef=0.01,0.1", "seed=1,2")
    assert len(rows) == 4 and {r["status"] for r in rows} == {"ok"}
    swept = {tuple(o for o in r["overrides"].split() if o.startswith(("algo.kl_coef", "seed="))) for r in rows}
    assert swept == {(f"algo.kl_coef={k}", f"seed={s}") for k in ("0.01", "0.1") for s in (1, 2)}
    assert len({r["run_dir"] for r in rows}) == 4
    for row in rows:
        run_dir = Path(row["run_dir"])
        assert (run_dir / "checkpoints" / "last.ckpt").exists() and (run_dir / "csv" / "metrics.csv").exists()
        assert (run_dir / "result.json").exists()
        # held-out KL is far below the budget: the objective is the final held-out rlhf_reward itself
        assert float(row["objective"]) == pytest.approx(float(row["eval/rlhf_reward"]))
        for name in ("objective/scores", "objective/kl", "objective/rlhf_reward", "eval/kl"):
            float(row[name])
    assert "Sweep summary (4 runs)" in result.stdout


@pytest.mark.integration
def test_unknown_keys_beside_a_sweep_are_each_named_with_a_hint(tmp_path):
    """The hints compose the config without the sweep's values (compose() takes none): each sweep at its first one."""
    result = run_app("train.py", "-m", f"hydra.sweep.dir={tmp_path}", "algo=ppo,rloo", "algo.lr=1e-3,1e-2",
                     "algo.kl=0.1", cwd=ROOT)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: algo.kl is not a setting (did you mean 'kl_coef' or 'kl_estimator' or 'kl_controller'?); nor is "
        "algo.lr (did you mean 'algo.optimizer.lr'?); see `python train.py --cfg job` for every key.")


@pytest.mark.integration
def test_a_failing_trial_is_recorded_and_the_sweep_goes_on_and_each_trial_gets_its_own_wandb_run(tmp_path):
    result, rows = multirun(tmp_path, "trainer=default,ddp,default", "seed=3", "logger=wandb")
    assert [r["status"] for r in rows] == ["ok", "failed", "ok"]
    failed = rows[1]
    assert "use trainer=ddp_spawn for sweeps" in failed["error"] and failed["objective"] == ""
    for ok in (rows[0], rows[2]):
        assert float(ok["objective"]) == pytest.approx(float(ok["eval/rlhf_reward"]))
        assert len(list((Path(ok["run_dir"]) / "wandb").glob("offline-run-*"))) == 1  # not the previous trial's
    assert "job 1 failed: trainer=ddp does not work inside a Hydra multirun" in result.stdout
    # when it failed, a user mistake was one line, as in a single run
    assert "error: trainer=ddp does not work inside a Hydra multirun" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.integration
def test_a_sweep_whose_jobs_run_in_processes_of_their_own_reports_and_stops_as_one_that_runs_them_here(tmp_path):
    """hydra/launcher=joblib: each job runs in a worker process, where the app's own start-up did not run. There a
    user mistake printed its traceback, and each of Lightning's lines came twice (its console and Hydra's). And
    Ctrl-C in the terminal (to the process group) ended the sweep's process at once, and joblib killed the workers in
    the middle of their step: no checkpoint, no result.json. Now each job in progress stops as a single run does, the
    jobs not started then do not run, and the sweep's process ends with one line after the summary, exit 130."""
    stop = ["+callbacks.stop._target_=tests.helpers.CtrlCToTheGroupOnce", "+callbacks.stop.step=1",
            f"+callbacks.stop.flag={tmp_path / 'signalled'}"]
    result = run_process("train.py", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *SHORT, *stop,
                         "algo.kl_coef=-1,0.01,0.02,0.03", cwd=tmp_path, new_session=True)
    assert result.returncode == 130, result.stderr[-3000:]
    sweep_dir = next((tmp_path / "logs" / "train" / "multiruns").iterdir())
    with open(sweep_dir / "summary.csv") as f:
        rows = [(row["job"], row["status"]) for row in csv.DictReader(f)]
    # job 0 fails at once and job 2 takes its worker; the first of jobs 1 and 2 to end an RL step sends the Ctrl-C
    assert rows[:2] == [("0", "failed"), ("1", "interrupted")] and rows[2:] in ([], [("2", "interrupted")]), rows
    assert not (sweep_dir / "3").exists() and not (sweep_dir / ".stopping").exists()
    saved = []
    for job, _ in rows[1:]:  # each stopped after its step with its checkpoint, or in its set-up with none
        recorded = json.loads((sweep_dir / job / "result.json").read_text())
        saved.append((sweep_dir / job / "checkpoints" / "interrupted.ckpt").exists())
        assert saved[-1] == recorded["error"].startswith("stopped by Ctrl-C after RL step 1 of 2; resume with: ")
        assert saved[-1] or recorded["error"].startswith("stopped by Ctrl-C before the first RL step began"), recorded
        assert f"The sweep's job {job} stopped, whose line follows.\n{recorded['error']}" in result.stderr
    assert any(saved)  # the one that signalled, at the end of its RL step 1
    assert result.stderr.strip().splitlines()[-1].startswith("The sweep stopped by Ctrl-C: its job")
    assert "error: algo.kl_coef=-1.0 must be >= 0." in result.stderr and "Traceback" not in result.stderr
    assert (result.stdout + result.stderr).count("Seed set to 0") == len(rows), result.stdout + result.stderr


@pytest.mark.integration
@pytest.mark.parametrize("signame, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_ctrl_c_or_sigterm_stops_the_sweep_records_its_job_as_interrupted_and_says_how_to_resume_it(signame, code,
                                                                                                     tmp_path):
    """A sweep's job stopped by SIGTERM ended the sweep with exit code 0 and no line or result.json (a preempted
    sweep read as a finished one); by Ctrl-C, with a traceback and exit code 1. Now the job's checkpoint, its
    result.json (status interrupted, with the line), the summary of the runs so far, one line saying the sweep
    stopped, and the job's own stop line (Ctrl-C: its resume command); the later jobs do not run."""
    stop = ["+callbacks.stop._target_=tests.helpers.SignalAt", "+callbacks.stop.step=9,1,1",  # in job 1's RL step 1
            f"+callbacks.stop.signal={signame}"]
    result = run_app("train.py", "-m", f"hydra.sweep.dir={tmp_path}", *SHORT, *stop, cwd=ROOT)
    assert result.returncode == code, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    said, line = result.stderr.strip().splitlines()[-2:]
    assert said == "The sweep stopped in its job 1, whose line follows; the jobs after it did not run."
    assert line.startswith("stopped by SIGTERM after a complete RL step" if signame == "SIGTERM" else
                           "stopped by Ctrl-C after RL step 1 of 2; resume with: "), line
    assert (tmp_path / "1" / "checkpoints" / "interrupted.ckpt").exists() and not (tmp_path / "2").exists()
    recorded = json.loads((tmp_path / "1" / "result.json").read_text())
    assert (recorded["status"], recorded["job"], recorded["error"]) == ("interrupted", 1, line)
    with open(tmp_path / "summary.csv") as f:  # the runs so far, as a finished sweep's summary has them
        assert [(row["job"], row["status"]) for row in csv.DictReader(f)] == [("0", "ok"), ("1", "interrupted")]
    assert "Sweep summary (2 runs)" in result.stdout and "failed" not in result.stdout
    if signame == "SIGTERM":
        return
    # the resume command (a single run in the job's directory) records the job under its number and sweep overrides
    # (it recorded "job": null and the resume's own overrides), and writes the sweep's summary with its row again
    argv = shlex.split(line.split("resume with: ", 1)[1])
    resumed = run_app("train.py", *argv[2:], cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    finished = json.loads((tmp_path / "1" / "result.json").read_text())
    assert (finished["status"], finished["job"], finished["overrides"]) == ("ok", 1, recorded["overrides"])
    with open(tmp_path / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(row["job"], row["status"]) for row in rows] == [("0", "ok"), ("1", "ok")]
    assert float(rows[1]["objective"]) == pytest.approx(finished["objective"])
    assert "Sweep summary (2 runs)" in resumed.stdout


def trial_of(sweeper: str, optimized_metric, tmp_path, monkeypatch):
    """A composed train.py config, with Hydra's config set as in a multirun's trial run by `sweeper`."""
    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=[f"paths.output_dir={tmp_path}"], return_hydra_config=True)
    cfg.hydra.runtime.output_dir = str(tmp_path)
    cfg.hydra.mode = RunMode.MULTIRUN
    cfg.hydra.sweeper = {"_target_": sweeper}
    cfg.optimized_metric = optimized_metric
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None, raising=False)  # the original comes back after the test
    HydraConfig.instance().set_config(cfg)
    return cfg


OPTUNA = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"


def test_a_job_in_a_launchers_process_names_the_sweeps_app_in_its_resume_command(tmp_path, monkeypatch):
    """submitit runs a sweep's job under its own script (sys.argv[0] = .../submitit/core/_submit.py): the job's resume
    line named that script. It names the sweep's command line, which the sweep's process passes on."""
    trial_of(BASIC_SWEEPER, None, tmp_path, monkeypatch)
    monkeypatch.setattr(sys, "argv", ["/site/submitit/core/_submit.py", "/sweep/.submitit/12749"])
    monkeypatch.setenv(APP_ARGV, json.dumps(["/repo/train.py", "--config-name", "train", "-m", "algo.kl_coef=1,2"]))
    monkeypatch.setattr(sweeps, "STARTED_SWEEP", {})  # a worker: the multirun started in another process
    assert resume_command(Path("/r/last.ckpt")).startswith("python /repo/train.py --config-name train paths.")
    monkeypatch.setattr(sweeps, "STARTED_SWEEP", {"dir": tmp_path})  # the sweep's own process: its own command line
    assert resume_command(Path("/r/last.ckpt")).startswith("python /site/submitit/core/_submit.py paths.")


@pytest.mark.parametrize("optimized_metric, typed", [(None, "null"), ("", "''")])
def test_a_search_without_an_objective_is_refused_in_its_first_trial(optimized_metric, typed, tmp_path, monkeypatch):
    """Hydra's Optuna sweeper needs each trial's objective: with optimized_metric=null every trial trained in full,
    then failed on "Return value must be float-castable"."""
    with pytest.raises(ConfigError) as refused:
        check_search_objective(trial_of(OPTUNA, optimized_metric, tmp_path, monkeypatch))
    assert str(refused.value) == (
        f"optimized_metric={typed}: the OptunaSweeper searches for the trial with the best objective, and this gives "
        f"it none; name the metric to optimize (e.g. optimized_metric=eval/rlhf_reward).")


@pytest.mark.parametrize("sweeper, optimized_metric", [(BASIC_SWEEPER, None), (OPTUNA, "eval/scores")])
def test_a_grid_sweep_without_an_objective_or_a_search_with_one_passes(sweeper, optimized_metric, tmp_path,
                                                                       monkeypatch):
    check_search_objective(trial_of(sweeper, optimized_metric, tmp_path, monkeypatch))


def test_wandb_runs_of_a_sweep_share_a_group_named_after_the_sweep_and_no_unasked_setting(tmp_path, monkeypatch):
    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=["logger=wandb", f"paths.output_dir={tmp_path}",
                                          f"hydra.sweep.dir={tmp_path}/multiruns/2026-01-01_00-00-00"],
                      return_hydra_config=True)
    cfg.hydra.mode = RunMode.MULTIRUN
    cfg.hydra.job.name = "train"
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None, raising=False)  # the original comes back after the test
    HydraConfig.instance().set_config(cfg)
    assert sweep_group() == "train-2026-01-01_00-00-00"
    import wandb

    asked = []
    init = wandb.init
    monkeypatch.setattr(wandb, "init", lambda **kwargs: asked.append(kwargs) or init(**kwargs))
    (logger,) = instantiate_group(cfg.logger, group=sweep_group())
    try:
        assert logger.experiment.group == "train-2026-01-01_00-00-00"
    finally:
        finish_wandb_run([logger])
    # Lightning's own logger passes anonymous=None, on which wandb warns "The anonymous setting has no effect"
    assert len(asked) == 1 and "anonymous" not in asked[0]


@pytest.mark.integration
@pytest.mark.floors  # hydra-optuna-sweeper 1.2 has no max_failure_rate, which hparams_search=rloo_optuna sets
def test_a_two_trial_optuna_search_completes(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    _, rows = multirun(tmp_path, "hparams_search=rloo_optuna", "hydra.sweeper.n_trials=2",
                       "hydra.sweeper.sampler.n_startup_trials=2")
    assert len(rows) == 2 and {r["status"] for r in rows} == {"ok"}
    assert len({r["overrides"] for r in rows}) == 2  # two different points of the search space
    assert (tmp_path / "optimization_results.yaml").exists()
    best = OmegaConf.load(tmp_path / "optimization_results.yaml")
    assert best.best_value == pytest.approx(max(float(r["objective"]) for r in rows))


@pytest.mark.integration
def test_a_sweep_whose_every_job_failed_exits_2_after_its_summary(tmp_path):
    """A failing job is recorded and the sweep goes on (exit code 0 with jobs that completed); with none completed
    the exit code was 0 too, and a script running the sweep saw success."""
    result = run_app("train.py", "-m", f"hydra.sweep.dir={tmp_path}", "data=files", "data.dataset=a.jsonl,b.jsonl",
                     cwd=ROOT)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: every job of the sweep failed, as said above (and in {tmp_path / 'summary.csv'}); fix that and sweep "
        f"again.")
    assert result.stdout.count("failed: data.dataset=") == 2


@pytest.mark.integration
@pytest.mark.floors  # as above
def test_an_optuna_search_whose_every_trial_failed_ends_in_one_line_after_its_summary(tmp_path):
    """Optuna's sweeper asks for the best trial once its trials ran: "No trials are completed yet." was a traceback
    of Optuna's storage, with no summary of why the trials failed."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    search = ["hparams_search=rloo_optuna", "hydra.sweeper.sampler.n_startup_trials=2"]
    result = run_app("train.py", "-m", f"hydra.sweep.dir={tmp_path}", *SHORT, *search, "hydra.sweeper.n_trials=2",
                     "data=files", "data.dataset=no_such.jsonl", cwd=ROOT)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: no trial of the search completed: each failed, as said above (and in {tmp_path / 'summary.csv'}); "
        f"fix that and search again.")
    with open(tmp_path / "summary.csv") as f:
        assert [row["status"] for row in csv.DictReader(f)] == ["failed", "failed"]
    assert result.stdout.count("failed: data.dataset='no_such.jsonl': no such file") == 2
    result = run_app("train.py", "-m", f"hydra.sweep.dir={tmp_path / 'none'}", *search, "hydra.sweeper.n_trials=0",
                     cwd=ROOT)
    assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (2, (
        "error: the search ran no trial (hydra.sweeper.n_trials=0); give hydra.sweeper.n_trials >= 1."))
    (tmp_path / "here").mkdir()
    result = run_app("train.py", "-m", *search, "optimized_metric=null",
                     cwd=tmp_path / "here")  # its first trial ends the search, before it trains
    assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (2, (
        "error: optimized_metric=null: the OptunaSweeper searches for the trial with the best objective, and this "
        "gives it none; name the metric to optimize (e.g. optimized_metric=eval/rlhf_reward)."))
    assert not list((tmp_path / "here").iterdir())  # nor the sweep's directory (it held its lock file alone)


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml")))
def test_every_experiment_composes_and_instantiates_without_weights(experiment, tmp_path):
    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        # what its command adds (two_task_distill's routed teachers are all embedded)
        needs_teacher = "distill" in experiment and not experiment.startswith("two_task")
        teacher = ["teacher.name_or_path=any-teacher"] if needs_teacher else []
        cfg = compose("train", overrides=[f"experiment={experiment}", f"paths.root_dir={tmp_path}",
                                          f"paths.output_dir={tmp_path}", *teacher])
    assert cfg.task_name == experiment
    module = instantiate(cfg.algo, _convert_="all")
    assert module.policy is None and module.hparams.model["name_or_path"] == cfg.model.name_or_path
    assert instantiate(cfg.data).hparams.tokenizer == cfg.model.name_or_path
    instantiate(cfg.reward)  # reward models load on first call
    if experiment.startswith(("calculator", "two_task")):  # multi-turn: the environment reaches the module
        assert module.environment.max_turns == cfg.env.max_turns and module.environment.schemas
    if experiment.startswith(("sentiment", "arithmetic", "calculator", "two_task")):
        trainer = instantiate(cfg.trainer, logger=False)
        assert trainer.max_steps == -1 and module.hparams.rl_steps == cfg.steps  # RL steps are the unit
    elif experiment.startswith("gsm8k"):  # GPU + Hub: GRPO with the math-verify reward and task metric
        assert type(module).__name__ == "GRPOModule" and module.hparams.num_generations == 8
        assert [type(m).__name__ for m in module.task_metrics] == ["MathVerifyMatch"]
        assert cfg.optimized_metric == "eval/math_verify" and cfg.data.apply_chat_template
    else:  # GPU + deepspeed presets: check the mapping of the published command instead
        assert cfg.trainer.strategy == "deepspeed_stage_2" and cfg.model.lora is None
        assert cfg.algo.optimizer.lr == 3e-6 and cfg.algo.missing_eos_penalty == 1.0
        per_rank = cfg.data.batch_size // cfg.trainer.devices * module.samples_per_prompt
        micro = per_rank // cfg.algo.num_mini_batches // cfg.algo.gradient_accumulation_steps
        assert micro == 16  # TRL's per_device_train_batch_size


def test_the_summary_leaves_out_a_result_json_it_did_not_write_with_a_warning(tmp_path, capsys):
    """A result.json edited, or of another program, in a sweep directory: unchecked, it ends the sweep's summary
    (after every job has run) with a JSONDecodeError, KeyError or TypeError traceback."""
    from lit_rlhf.cli.sweeps import summary_rows, write_result

    write_result(tmp_path / "0", "ok", 0.5, {"objective/scores": 0.5})
    assert not list((tmp_path / "0").glob(".*"))  # the partial file it is written to is renamed over result.json
    for name, text in [("1", '{"job": 1, "status": "ok", "overr'), ("2", "[1, 2]"),
                       ("3", json.dumps({**json.loads((tmp_path / "0" / "result.json").read_text()),
                                         "metrics": {"objective/scores": "high"}})),
                       ("4\x1b[2J", json.dumps({"job": 4}))]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(text)
    rows = summary_rows(tmp_path)
    assert [(row["job"], row["status"], row["objective"]) for row in rows] == [(None, "ok", 0.5)]
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 4 and all(line.startswith("warning: ") and line.endswith(
        "is not a run's result as this library writes it; the summary leaves that run out.") for line in warnings)
    assert not any("\x1b" in line for line in warnings)


def test_a_result_that_cannot_be_written_is_a_warning_that_leaves_the_runs_own_line_to_be_said(tmp_path, monkeypatch,
                                                                                              capsys):
    """On a full disk, writing result.json after a failure raised from the failure's handler: a traceback in place
    of the run's line (its error and resume command)."""
    import errno

    from lit_rlhf.cli.sweeps import write_result

    def full_disk(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    write_result(tmp_path, "failed", None, {}, "the run's error")
    said = capsys.readouterr().out
    assert said == f"warning: {tmp_path / 'result.json'} was not written (No space left on device).\n"
    assert not list(tmp_path.iterdir())
