"""Ctrl-C or SIGTERM after training finished stops the end-of-run reports at once, records the run as
interrupted in result.json, and leaves the final checkpoint complete."""

import csv
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import lightning as L
import pytest
import torch
from safetensors.torch import load_file

from lit_rlhf.interrupts import (
    CallAbandoned,
    EndOfRunInterrupted,
    TrainingInterrupted,
    abandon_waiting_call,
    abandonable,
    end_of_run_interrupts,
    ranks_in_step,
    sigterm_heard_early,
    waiting_on,
)
from lit_rlhf.output_streams import HUNG_UP
from lit_rlhf.rollout.scoring import call_checked
from tests.apps import run_app
from tests.helpers import FAST, ROOT


@pytest.mark.integration
@pytest.mark.parametrize("signame, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_during_the_end_of_run_evaluation_stops_it_and_records_the_run(signame, code, tmp_path):
    run_dir = tmp_path / "run"
    reports = [a for a in FAST if not a.startswith("callbacks.evaluation")]
    # a long end-of-run evaluation: 256 completions per held-out prompt and side
    args = [str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", *reports, "callbacks.evaluation.samples_per_prompt=256"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    last = run_dir / "checkpoints" / "last.ckpt"
    while not last.exists() and process.poll() is None:  # written when training finishes
        time.sleep(0.05)
    time.sleep(0.5)  # into the evaluation
    process.send_signal(getattr(signal, signame))
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stderr[-3000:]
    line = stderr.strip().splitlines()[-1]
    assert line.startswith(f"stopped by {signame.replace('SIGINT', 'Ctrl-C')} during the end-of-run reports"), line
    assert line.endswith(f"; run them again with: python {ROOT / 'train.py'} {shlex.join(reports)} "
                         f"callbacks.evaluation.samples_per_prompt=256 hydra.run.dir={run_dir} ckpt_path={last}"), line
    assert "Traceback" not in stderr
    assert not (run_dir / "evaluation" / "evaluation.json").exists()  # the reports were cut short
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "interrupted"
    assert torch.load(last, weights_only=True)["rlhf_state"]["rl_step"] == 1


BEFORE_TRAINING = {  # how the signal comes; the exit code and what the last line says stopped the run
    "SIGTERM while the model and rewards load": (
        ["reward.rewards.vader._target_=tests.helpers.RewardThatSignalsWhileBuilt"], 143,
        "SIGTERM before the first RL step began"),
    "Ctrl-C while the model and rewards load": (
        ["reward.rewards.vader._target_=tests.helpers.RewardThatSignalsWhileBuilt",
         "+reward.rewards.vader.signame=SIGINT"], 130, "Ctrl-C before the first RL step began"),
    "SIGTERM in the set-up": (["+callbacks.stop._target_=tests.helpers.SignalInSetup"], 143,
                              "SIGTERM before the first RL step began"),
    "Ctrl-C in the set-up": (["+callbacks.stop._target_=tests.helpers.SignalInSetup", "+callbacks.stop.signal=SIGINT"],
                             130, "Ctrl-C before the first RL step began"),
    "SIGTERM in the reward of the samples before training": (
        ["reward._target_=tests.helpers.reward_that_signals_in_its_first_call"], 143,
        "SIGTERM before the first RL step began (while waiting on the reward reward_that_signals_in_its_first_call, "
        "which was abandoned)"),
    "Ctrl-C in the reward of the samples before training": (
        ["reward._target_=tests.helpers.reward_that_interrupts_in_its_first_call"], 130,
        "Ctrl-C before the first RL step began"),
}


@pytest.mark.integration
@pytest.mark.parametrize("when", BEFORE_TRAINING)
def test_a_signal_before_training_stops_the_run_before_its_first_step_without_a_checkpoint(when, tmp_path):
    """A SIGTERM in the fit's set-up (before Lightning's handler listens) or while the samples drawn before training
    wait on a reward (a scheduler's preemption while a large model starts) reached only a handler that let the run go
    on: it trained to its end. A Ctrl-C there (or in the fit's set-up) ended it with Lightning's exit code 1 and no
    result.json; while the model and rewards loaded, SIGTERM killed the process without a line or result.json, Ctrl-C
    printed a traceback. Now the samples due before training are skipped or (SIGTERM) their call abandoned, and the
    run stops before its first RL step: exit 143 or 130, recorded as interrupted, no checkpoint (nothing was
    trained)."""
    from tests.helpers import REWARD_CALLS

    REWARD_CALLS["first"] = 0
    signal_at, code, stopped_by = BEFORE_TRAINING[when]
    shown = [a for a in FAST if not a.startswith(("callbacks.training_summary", "callbacks.generation_samples"))]
    result = run_app("train.py", "hydra.run.dir=run", *shown, "steps=2", *signal_at, cwd=tmp_path)
    assert result.returncode == code, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"stopped by {stopped_by}: nothing was trained and no checkpoint was written; run the same command again to "
        f"start it (or resume it).")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
    assert not (tmp_path / "run" / "samples.jsonl").exists()  # the samples before training: skipped, or abandoned
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "interrupted"


@pytest.mark.integration
def test_ctrl_c_during_training_records_the_run_as_interrupted_and_the_printed_command_resumes_it(tmp_path):
    """A non-default run stopped by Ctrl-C: exit 130, result.json says interrupted, no end-of-run evaluation, and
    the printed command (the run's own command line plus its run directory and ckpt_path) resumes it to the end in
    the same run directory: one metrics.csv with every RL step once, also from a folder whose name Hydra's grammar
    reads otherwise unquoted (parentheses, a comma, a non-ASCII letter) and with a config of the user's own
    (--config-dir, --config-name), which the command repeats. Nothing speaks of unrestricted loading."""
    import shlex

    here = tmp_path / "My Drive (2024), jürgen"
    (here / "conf").mkdir(parents=True)
    (here / "conf" / "mine.yaml").write_text("defaults:\n  - train\n  - _self_\nalgo:\n  kl_coef: 0.07\n")
    fast = [a for a in FAST if not a.startswith(("steps=", "callbacks.evaluation"))]
    args = ["--config-dir", "conf", "--config-name", "mine", *fast, "steps=6",
            "callbacks.progress_lines.every_n_steps=1"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], cwd=here, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stdout:  # the progress lines: stdout is not a terminal
        if line.startswith("RL step 1/6"):
            break
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-3000:]
    last_line = stderr.strip().splitlines()[-1]
    assert last_line.startswith("stopped by Ctrl-C after RL step ") and "Traceback" not in stderr
    assert "weights_only" not in stdout + stderr
    command = last_line.split("resume with: ", 1)[1]
    (run_dir,) = (here / "logs" / "train" / "runs").iterdir()
    assert json.loads((run_dir / "result.json").read_text())["status"] == "interrupted"
    assert not (run_dir / "evaluation").exists()  # no minutes of evaluation after the user asked to stop
    assert f"--config-name mine --config-dir '{here / 'conf'}'" in command and "ckpt_path=" in command

    argv = shlex.split(command)
    assert argv[:2] == ["python", str(ROOT / "train.py")]
    resumed = run_app("train.py", *argv[2:], cwd=here)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "RL step 6/6" in resumed.stdout
    assert list((here / "logs" / "train" / "runs").iterdir()) == [run_dir]
    with open(run_dir / "csv" / "metrics.csv") as f:
        steps = [int(row["step"]) for row in csv.DictReader(f) if row.get("objective/scores")]
    assert steps == list(range(6))  # the logged step counts from 0


@pytest.mark.parametrize("interruption", [EndOfRunInterrupted("SIGINT"), TrainingInterrupted("stopped")])
def test_an_interruption_arriving_inside_a_reward_is_not_reported_as_the_rewards_error(interruption):
    # a signal raises where the main thread is: often inside a reward, whose errors are otherwise made one line
    def reward(prompts, completions):
        raise interruption

    with pytest.raises(type(interruption)):
        call_checked("vader", reward, ["a prompt"], ["a completion"], None)


class Agreement:
    """A stand-in for the ranks' all-reduce: records what this rank said, answers which ranks abandoned."""

    def __init__(self, others_abandoned: list[int]):
        self.others, self.said = others_abandoned, []

    def __call__(self, abandoned: bool) -> list[int]:
        self.said.append(abandoned)
        return sorted([*self.others, 0] if abandoned else self.others)


def test_with_ranks_in_step_a_call_that_returned_stops_when_another_rank_abandoned_its_own():
    agree = Agreement(others_abandoned=[1])
    with ranks_in_step(agree), pytest.raises(CallAbandoned) as stopped:
        with abandonable("the reward vader"):
            assert waiting_on() == "the reward vader"
    assert agree.said == [False] and stopped.value.what == "the reward vader on rank 1"


def test_with_ranks_in_step_an_abandoned_call_is_said_to_the_others_before_it_stops_this_rank():
    agree = Agreement(others_abandoned=[])
    with ranks_in_step(agree), pytest.raises(CallAbandoned) as stopped:
        with abandonable("the reward vader"):
            raise CallAbandoned("the reward vader")  # what the SIGTERM handler raises inside the call
    assert agree.said == [True] and stopped.value.what == "the reward vader"
    calm = Agreement(others_abandoned=[])
    with ranks_in_step(calm), abandonable("the teacher"):  # no rank abandoned: the step goes on
        pass
    assert calm.said == [False]


def test_a_second_sigterm_while_the_first_abandoned_call_unwinds_abandons_nothing_more():
    """The launching rank forwards the SIGTERM its process group got: a rank may get it twice."""
    with abandonable("the reward vader"):
        assert abandon_waiting_call() == "the reward vader"  # the first SIGTERM: raised by the handler
        assert abandon_waiting_call() is None  # the second, before the first reached the block's end
    assert abandon_waiting_call() is None


def test_a_sigterm_heard_in_a_runs_first_moments_is_not_carried_into_the_next_run_in_the_process():
    """It stopped the next fit in the same process (a test's, a notebook's) before its first step."""
    with end_of_run_interrupts(training_finished=lambda: False):
        os.kill(os.getpid(), signal.SIGTERM)  # noted for CheckpointOnInterrupt, which listens from its setup
        deadline = time.monotonic() + 5
        while not sigterm_heard_early() and time.monotonic() < deadline:
            time.sleep(0.01)  # the handler runs in the main thread between bytecodes
        assert sigterm_heard_early()
    assert not sigterm_heard_early()


def test_a_signal_between_a_stopped_fits_end_and_its_line_passes():
    """The fit a Ctrl-C stopped had ended (its checkpoint written, training_finished set by the fit's end): a second
    Ctrl-C before the stop's line was said as a stop of the end-of-run reports, which a stopped run does not run."""
    with end_of_run_interrupts(training_finished=lambda: True, stopped=lambda: True):
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)
    with pytest.raises(EndOfRunInterrupted), end_of_run_interrupts(training_finished=lambda: True):
        signal.raise_signal(signal.SIGINT)


def test_a_call_that_runs_the_ranks_collectives_is_abandonable_only_without_other_ranks_in_step():
    agree = Agreement(others_abandoned=[])
    with ranks_in_step(agree), abandonable("the teacher", runs_collectives=True):
        assert waiting_on() is None  # a SIGTERM here is noted, not raised: the forward ends on every rank
    assert agree.said == []
    with abandonable("the teacher", runs_collectives=True):  # one rank: abandoned as any call
        assert waiting_on() == "the teacher"
    with ranks_in_step(None), abandonable("the reward vader"):  # one rank under a Trainer: no agreement
        assert waiting_on() == "the reward vader"


def logged_rows(run_dir) -> list[dict[str, str]]:
    """metrics.csv's rows, without the columns of time taken."""
    with open(run_dir / "csv" / "metrics.csv") as file:
        return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(file)]


@pytest.mark.integration
@pytest.mark.parametrize("script, signame, step", [("train_sft.py", "SIGTERM", 2), ("train_dpo.py", "SIGINT", 3),
                                                   ("train_reward_model.py", "SIGTERM", 2)])
def test_the_offline_fitting_scripts_write_a_checkpoint_when_stopped_and_resume_from_it(script, signame, step,
                                                                                         tmp_path):
    """SFT, DPO and the reward model stopped by SIGTERM or Ctrl-C write checkpoints/interrupted.ckpt, say so in
    their own steps, record the run as interrupted, and the checkpoint resumes to the end of the fit in the middle of
    its epoch, on the batches the uninterrupted fit trains on (both write the same model), whose last.ckpt (replaced,
    never versioned beside a stale one) holds the final step, and metrics.csv holds the uninterrupted fit's rows: the
    held-out evaluation due at the stopped step too, and none more (Ctrl-C at step 3). The fits are cut to 4
    optimizer steps (the embedded reward model's 3 epochs took half a minute here), evaluated every 2."""
    stop = ["+callbacks.stop._target_=tests.helpers.SignalAt", f"+callbacks.stop.step={step}",
            f"+callbacks.stop.signal={signame}"]
    fit = ["trainer.max_steps=4", "trainer.val_check_interval=2", "trainer.log_every_n_steps=1"]
    stopped = run_app(script, "hydra.run.dir=run", *fit, *stop, cwd=tmp_path)
    assert stopped.returncode == {"SIGTERM": 143, "SIGINT": 130}[signame], stopped.stderr[-3000:]
    line = stopped.stderr.strip().splitlines()[-1]
    expected = ("stopped by SIGTERM after a complete training step" if signame == "SIGTERM" else
                f"stopped by Ctrl-C after training step {step}; resume with: ")
    assert line.startswith(expected) and "RL step" not in line, line
    checkpoint = tmp_path / "run" / "checkpoints" / "interrupted.ckpt"
    assert torch.load(checkpoint, weights_only=True)["global_step"] == step
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "interrupted"
    assert not (tmp_path / "run" / "policy").exists() and not (tmp_path / "run" / "reward_model").exists()
    resumed = run_app(script, "hydra.run.dir=run", *fit, f"ckpt_path={checkpoint}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["status"] == "ok" and result["objective"] is not None  # the final weights evaluated, mid-epoch
    assert "Held-out" in resumed.stdout and "was not logged" not in resumed.stderr, resumed.stderr[-3000:]
    assert torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["interrupted.ckpt", "last.ckpt"]
    whole = run_app(script, "hydra.run.dir=whole", *fit, cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr[-3000:]
    saved = "reward_model" if script == "train_reward_model.py" else "policy"
    resumed_weights = load_file(tmp_path / "run" / saved / "model.safetensors")
    for name, tensor in load_file(tmp_path / "whole" / saved / "model.safetensors").items():
        assert torch.equal(resumed_weights[name], tensor), name  # trained on the same batches, in the same order
    assert logged_rows(tmp_path / "run") == logged_rows(tmp_path / "whole")


class RaisesInItsSecondStep(L.LightningModule):
    """One weight; training step 2 raises (a reward's error, a lost rank: any exception that ends a fit)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        if batch_idx == 1:
            raise ValueError("the reward failed")
        return (self.weight - batch).pow(2).mean()

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.ones(4, 1), batch_size=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.integration
def test_a_fit_that_ended_in_an_exception_gives_ctrl_c_and_sigterm_back_to_the_process(tmp_path):
    """Lightning calls no callback's teardown when fit raises: CheckpointOnInterrupt's handlers stayed, and in the same
    process (a notebook, a script that goes on) Ctrl-C then only printed that the step would finish."""
    from lit_rlhf.callbacks import CheckpointOnInterrupt

    heard = []
    before = signal.signal(signal.SIGINT, signal.default_int_handler), signal.signal(
        signal.SIGTERM, lambda signum, frame: heard.append(signum))  # the process's own SIGTERM handler
    try:
        trainer = L.Trainer(max_steps=4, logger=False, enable_progress_bar=False, enable_model_summary=False,
                            callbacks=[CheckpointOnInterrupt(dirpath=str(tmp_path))], default_root_dir=tmp_path)
        with pytest.raises(ValueError, match="the reward failed"):
            trainer.fit(RaisesInItsSecondStep())
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler runs in the main thread between bytecodes
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not heard and time.monotonic() < deadline:
            time.sleep(0.01)
        assert heard == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


@pytest.mark.integration
@pytest.mark.parametrize("at", ["teardown", "train end"])
def test_a_sigterm_after_an_offline_fit_stops_its_save_in_one_line_and_a_resume_saves(at, tmp_path):
    """SIGTERM after the fit's training (last.ckpt written), in the save of the model folder and the held-out figures:
    it ended the process by the signal's default action (no line, no result.json, a folder it was writing left
    half-written); while the final checkpoint was written, it was not heard at all (the fit saved and said "ok").
    Now: one line, exit 143, status interrupted, no model folder; the resume from last.ckpt trains nothing and writes
    it (the command the line prints)."""
    stopped = run_app("train_sft.py", "trainer.max_steps=2",
                      "+callbacks.stop._target_=tests.helpers.SignalAfterTraining", f"+callbacks.stop.at={at}",
                      cwd=tmp_path)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    line = stopped.stderr.strip().splitlines()[-1]
    assert line.startswith("stopped by SIGTERM during the end-of-run reports"), line
    run_dir = next((tmp_path / "logs" / "train_sft" / "runs").iterdir())
    assert json.loads((run_dir / "result.json").read_text())["status"] == "interrupted"
    assert not (run_dir / "policy").exists()
    python, script, *args = shlex.split(line.split("; run them again with: ")[1])
    assert (python, script) == ("python", str(ROOT / "train_sft.py"))
    assert args[-1] == f"ckpt_path={run_dir}/checkpoints/last.ckpt"
    resumed = run_app("train_sft.py", *[a for a in args if not a.startswith("+callbacks.stop")], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (run_dir / "policy" / "model.safetensors").exists()


@pytest.mark.integration
def test_ctrl_c_after_the_last_steps_end_is_not_lost(tmp_path):
    """Ctrl-C after the last step's end, as its final checkpoints were written (callbacks' on_train_end): the app said
    "finishing this RL step, then writing a checkpoint" and no step's end came to act on it; the run went on through
    its end-of-run reports and exited 0, recorded as ok. Now it stops there as a Ctrl-C during the reports does."""
    stop = ["+callbacks.stop._target_=tests.helpers.SignalAfterTraining", "+callbacks.stop.signal=SIGINT",
            "+callbacks.stop.at=train end"]
    result = run_app("train.py", "hydra.run.dir=run", *FAST, *stop, cwd=tmp_path)
    assert result.returncode == 130, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("stopped by Ctrl-C during the end-of-run reports; training had finished"), line
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "interrupted"
    assert torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 1


@pytest.mark.integration
@pytest.mark.parametrize("signame, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_with_gradient_accumulation_a_stop_waits_for_the_optimizer_step_that_ends_the_sum(signame, code, tmp_path):
    """Stopped after a batch whose gradients waited for the next one (trainer.accumulate_grad_batches=2, the third
    batch), the fit wrote its checkpoint there and the resumed fit summed the next batches without it: other weights
    than the uninterrupted fit's. Now it stops after the fourth batch (optimizer step 2), and the resumed fit ends with
    the uninterrupted fit's weights and metrics.csv rows (SIGTERM's checkpoint, written after optimizer step 2's
    evaluation, resumed logging one step further on)."""
    fit = ["trainer.max_steps=4", "+trainer.accumulate_grad_batches=2", "trainer.val_check_interval=4",
           "+trainer.limit_val_batches=1", "trainer.log_every_n_steps=1"]  # an evaluation of one batch: it runs whole
    stop = ["+callbacks.stop._target_=tests.helpers.SignalAtBatch", "+callbacks.stop.batch=3",
            f"+callbacks.stop.signal={signame}"]
    stopped = run_app("train_sft.py", "hydra.run.dir=run", *fit, *stop, cwd=tmp_path)
    assert stopped.returncode == code, stopped.stderr[-3000:]
    checkpoint = tmp_path / "run" / "checkpoints" / "interrupted.ckpt"
    assert torch.load(checkpoint, weights_only=True)["global_step"] == 2
    resumed = run_app("train_sft.py", "hydra.run.dir=run", *fit, f"ckpt_path={checkpoint}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert run_app("train_sft.py", "hydra.run.dir=whole", *fit, cwd=tmp_path).returncode == 0
    resumed_weights = load_file(tmp_path / "run" / "policy" / "model.safetensors")
    for name, tensor in load_file(tmp_path / "whole" / "policy" / "model.safetensors").items():
        assert torch.equal(resumed_weights[name], tensor), name
    assert logged_rows(tmp_path / "run") == logged_rows(tmp_path / "whole")


@pytest.mark.integration
@pytest.mark.parametrize("script, at", [("train.py", "train end"), ("train.py", "teardown"),
                                        ("train_sft.py", "teardown")])
def test_a_second_ctrl_c_after_the_stops_checkpoint_ends_the_run_as_the_first_one_said(script, at, tmp_path):
    """Ctrl-C after step 2, then again while the fit ends (its last hooks, last.ckpt, its teardown): the second one
    was taken for an abort of a step already saved ("nothing of it was saved"), or for a Ctrl-C during the end-of-run
    reports ("training had finished ...; run them again with: ..."). It cuts short what is left of the fit: the
    stop's own line, exit 130, the run recorded as interrupted with the checkpoint of step 2."""
    length, said = ((*[a for a in FAST if not a.startswith("steps=")], "steps=6"), "RL step 2 of 6") \
        if script == "train.py" else (("trainer.max_steps=6",), "training step 2")
    signals = ["+callbacks.stop._target_=tests.helpers.SignalAt", "+callbacks.stop.step=2",
               "+callbacks.stop.signal=SIGINT", "+callbacks.again._target_=tests.helpers.SignalAfterTraining",
               "+callbacks.again.signal=SIGINT", f"+callbacks.again.at={at}"]
    result = run_app(script, "hydra.run.dir=run", *length, *signals, cwd=tmp_path)
    assert result.returncode == 130, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"stopped by Ctrl-C after {said}; resume with: "), line
    assert "Traceback" not in result.stderr
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "interrupted"
    assert torch.load(tmp_path / "run" / "checkpoints" / "interrupted.ckpt", weights_only=True)["global_step"] == 2


@pytest.mark.integration
def test_a_second_ctrl_c_while_the_stops_checkpoint_is_written_aborts_it_and_says_so(tmp_path):
    """It was taken for a Ctrl-C after the write ("cut short"): the write was abandoned, and the line still said
    `resume with: ... ckpt_path=.../interrupted.ckpt`, a file that was not there. Now it is the abort the first
    Ctrl-C's line offers, said as one: no checkpoint of the stop (nor a partial file), the earlier ones named."""
    signals = ["+callbacks.stop._target_=tests.helpers.SignalAt", "+callbacks.stop.step=2",
               "+callbacks.stop.signal=SIGINT", "+callbacks.again._target_=tests.helpers.SignalAfterTraining",
               "+callbacks.again.signal=SIGINT", "+callbacks.again.at=stop checkpoint"]
    length = (*[a for a in FAST if not a.startswith("steps=")], "steps=6")
    result = run_app("train.py", "hydra.run.dir=run", *length, *signals, cwd=tmp_path)
    assert result.returncode == 130, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line == ("stopped by a second Ctrl-C while the checkpoint of the stop was written: it was not written; "
                    "the checkpoints written before it stand (resume from checkpoints/last.ckpt, if one was "
                    "written)."), line
    assert "Traceback" not in result.stderr
    assert json.loads((tmp_path / "run" / "result.json").read_text())["error"] == line
    assert not list((tmp_path / "run").rglob("*.ckpt*"))  # nor a partial file


@pytest.mark.integration
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_in_the_apps_first_seconds_is_one_line_and_leaves_no_empty_run_directory(signame, tmp_path):
    """Ctrl-C once the job started (Hydra wrote .hydra/ in the new run directory) and before the set-up listens (the
    seconds of Lightning's imports): a KeyboardInterrupt's traceback, exit -2, and a run directory holding nothing of
    a run, to be taken for one. SIGTERM there (a scheduler's preemption), and SIGHUP, taken for it: the default action,
    exit -15 without a word, the directory left holding Hydra's start files, and the same command with the same
    hydra.run.dir refused. Now one line, exit 130 or 143, and the directory goes."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    sig = getattr(signal, signame)
    for _ in range(3):  # a run that ended before this busy test process could signal it proves nothing: again
        shutil.rmtree(tmp_path / "logs", ignore_errors=True)
        process = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *FAST], cwd=tmp_path, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                   preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))  # as from a terminal
        runs = tmp_path / "logs" / "train" / "runs"
        deadline = time.monotonic() + 120
        while not list(runs.glob("*/.hydra/config.yaml")) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        running = process.poll() is None
        os.killpg(process.pid, sig)
        _, stderr = process.communicate(timeout=120)
        if running:
            break
    assert process.returncode == (130 if signame == "SIGINT" else 143), f"signalled while running: {running}; {stderr}"
    assert "Traceback" not in stderr, stderr[-3000:]
    stop = {"SIGINT": "stopped by Ctrl-C", "SIGTERM": "stopped by SIGTERM", "SIGHUP": HUNG_UP + "stopped by SIGTERM"}
    assert stderr.strip().splitlines()[-1] == (f"{stop[signame]} as the run started: nothing was trained or written; "
                                               "run the same command again to start it.")
    assert not (tmp_path / "logs").exists()  # nor the folders created for it
