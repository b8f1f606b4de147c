"""Callbacks that tests attach to train.py runs through Hydra overrides."""

import os
import signal
from pathlib import Path

import lightning as L
import torch

from lit_rlhf.distributed.sharding import full_tensor, local_tensor
from tests.apps import ROOT  # noqa: F401  (the tests import it from here)


def signal_this_process(name: str) -> None:
    """SIGINT, SIGTERM, ... (by name) to this process: its handler runs in the main thread between bytecodes."""
    os.kill(os.getpid(), getattr(signal, name))


class DumpTrainable(L.Callback):
    """Writes, per rank, the trained tensors, the episode and token counts and the prompts each step saw."""

    def __init__(self, path: str):
        self.path, self.prompts = Path(path), []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.prompts.append(module.tokenizer.batch_decode(batch["input_ids"], skip_special_tokens=True))

    def on_fit_end(self, trainer, module):
        self.path.mkdir(parents=True, exist_ok=True)
        keys = module.trained_state_keys()
        # trainer=fsdp2: each rank holds shards (DTensors); full_tensor() gathers them (every rank calls it)
        trained = {k: full_tensor(v.detach()).cpu() for k, v in module.state_dict().items() if k in keys}
        torch.save({"trained": trained, "episode": module.episode, "num_tokens": module.num_tokens,
                    "prompts": self.prompts,
                    "kl_coef": module.kl_coef, "reward_model_numel": shard_numel(module, "reward_models"),
                    "teacher_model_numel": shard_numel(module, "teacher_models"),
                    "world_size": trainer.world_size}, self.path / f"rank{trainer.global_rank}.pt")


def shard_numel(module, name: str) -> tuple[int, int] | None:
    """(this rank's elements, all elements) of the models module.<name> registers (trainer=fsdp2's reward and
    teacher models), or None without them."""
    models = getattr(module, name, None)
    if models is None:
        return None
    return sum(local_tensor(p).numel() for p in models.parameters()), sum(p.numel() for p in models.parameters())


def save_reward_model(path) -> torch.nn.Module:
    """A tiny sequence-classification reward model on the tiny pythia's vocabulary, saved (safetensors) to path."""
    from transformers import GPTNeoXConfig, GPTNeoXForSequenceClassification

    from lit_rlhf.assets import TINY_PYTHIA
    from lit_rlhf.models import load_tokenizer

    config = GPTNeoXConfig(vocab_size=len(load_tokenizer(TINY_PYTHIA)), hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=64, num_labels=1, pad_token_id=1)
    torch.manual_seed(0)
    model = GPTNeoXForSequenceClassification(config)
    model.save_pretrained(path)
    return model


class ShorterWins:
    """A user-defined pairwise judge (reads only the texts): the shorter completion wins."""

    def __call__(self, prompts, policy_completions, reference_completions, policy_scores, reference_scores):
        return torch.tensor([1.0 if len(p) < len(r) else 0.0 if len(p) > len(r) else 0.5
                             for p, r in zip(policy_completions, reference_completions, strict=True)])


# a very short train.py run: 1 RL step of 4 prompts, 8 new tokens, no end-of-run reports
FAST = ["steps=1", "data.batch_size=4", "algo.response_length=8", "data.num_eval_prompts=4",
        "callbacks.generation_samples=null", "callbacks.training_summary=null", "callbacks.curves=null",
        "callbacks.histograms=null", "callbacks.evaluation=null"]


def one_line_error(result) -> str:
    """The error line of a run that must end with exit code 2 and no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def matches(line: str, expected: str) -> bool:
    """Whether `line` is `expected`'s beginning, or, for "A ... B", begins with A and ends with B."""
    begins, _, ends = expected.partition(" ... ")
    return line.startswith(begins) and line.endswith(ends)


def length_reward(prompts, completions, **columns):
    """Each completion's length in characters: scores no bounded reward gives."""
    return [float(len(c)) for c in completions]


def constant_reward(prompts, completions, **columns):
    """The same score for everything: every group's K rewards are equal."""
    import torch

    return torch.ones(len(completions))


class NonFiniteGradientsFrom(L.Callback):
    """From RL step `rl_step` on (0-based), every backward leaves a NaN in one trained gradient: a non-finite
    gradient on demand, where a diverging learning rate reaches one only with some machines' kernels."""

    def __init__(self, rl_step: int = 1):
        self.rl_step = rl_step

    def on_after_backward(self, trainer, module) -> None:
        if module.rl_step >= self.rl_step:
            grad = next(p.grad for p in module.trainable_parameters() if p.grad is not None)
            grad.view(-1)[0] = float("nan")


class RecordTrainedPrompts(L.Callback):
    """Appends {rl_step, prompts} of every trained RL step to a JSON-lines file, flushed at once (a run killed
    afterwards keeps them)."""

    def __init__(self, path: str):
        self.path = Path(path)

    def on_train_batch_end(self, trainer, module, *args):
        import json

        with self.path.open("a") as file:
            file.write(json.dumps({"rl_step": module.rl_step, "prompts": sorted(set(module.last_step_prompts))}) + "\n")


class KillAt(L.Callback):
    """SIGKILL of this process at the end of RL step `rl_step` (1-based: after that many steps)."""

    def __init__(self, rl_step: int):
        self.rl_step = rl_step

    def on_train_batch_end(self, trainer, module, *args):
        if module.rl_step == self.rl_step:
            os.kill(os.getpid(), signal.SIGKILL)


class SignalAt(L.Callback):
    """`signal` (SIGINT or SIGTERM) to this process at the end of optimizer step `step` (Lightning's global_step)."""

    def __init__(self, step: int, signal: str):
        self.step, self.signal = step, signal

    def on_train_batch_end(self, trainer, module, *args):
        if trainer.global_step == self.step:
            signal_this_process(self.signal)


class CtrlCToTheGroupOnce(L.Callback):
    """At the end of optimizer step `step`, SIGINT to this process's group, as Ctrl-C in a terminal sends it: by the
    first process of the group to get there (it creates `flag`), so that the others' steps do not send a second one."""

    def __init__(self, step: int, flag: str):
        self.step, self.flag = step, flag

    def on_train_batch_end(self, trainer, module, *args):
        if trainer.global_step != self.step:
            return
        try:
            Path(self.flag).touch(exist_ok=False)
        except FileExistsError:
            return
        os.killpg(os.getpgrp(), signal.SIGINT)


class SignalAtBatch(L.Callback):
    """`signal` (SIGINT or SIGTERM) to this process at the end of the fit's `batch`-th training batch (counted from 1;
    with gradient accumulation, also a batch that did not step the optimizer)."""

    def __init__(self, batch: int, signal: str):
        self.batch, self.signal = batch, signal

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.fit_loop.total_batch_idx + 1 == self.batch:
            signal_this_process(self.signal)


class SigtermRanksAt(L.Callback):
    """SIGTERM during optimizer step `step` to `whom`: "group" (rank zero signals its process group as the step
    begins, as `kill -TERM -<pgid>` does: every rank, and rank one again through Lightning's launcher) or "rank one"
    (that rank signals itself alone, after the step: as the evaluation due after it begins)."""

    def __init__(self, step: int, whom: str):
        self.step, self.whom = step, whom

    def on_train_batch_start(self, trainer, module, *args):
        if self.whom == "group" and trainer.global_step == self.step - 1 and trainer.global_rank == 0:
            os.killpg(os.getpgrp(), signal.SIGTERM)

    def on_validation_batch_start(self, trainer, module, *args):
        if self.whom == "rank one" and trainer.global_step == self.step and trainer.global_rank == 1:
            signal_this_process("SIGTERM")


class SignalInSetup(L.Callback):
    """This process signals itself with `signal` (SIGTERM or SIGINT) in the fit's set-up (this callback's `setup`:
    before Lightning's handler and CheckpointOnInterrupt's listen; checkpoint callbacks are set up last)."""

    def __init__(self, signal: str = "SIGTERM"):
        self.signal = signal

    def setup(self, trainer, module, stage):
        signal_this_process(self.signal)


class SignalAfterTraining(L.Callback):
    """This process signals itself with `signal` (SIGTERM or SIGINT) once the fit's training has ended: `at` "teardown"
    (the fit's end: its last checkpoint written), "train end" (as the final checkpoints are written: callbacks'
    on_train_end, which Lightning runs after the last step's stop check) or "stop checkpoint" (as the checkpoint of
    a stop by Ctrl-C is being written)."""

    def __init__(self, signal: str = "SIGTERM", at: str = "teardown"):
        self.signal, self.at = signal, at

    def send(self):
        signal_this_process(self.signal)

    def on_train_end(self, trainer, module):
        if self.at == "train end":
            self.send()

    def teardown(self, trainer, module, stage):
        if self.at == "teardown" and stage == "fit":
            self.send()

    def on_save_checkpoint(self, trainer, module, checkpoint):
        if self.at == "stop checkpoint" and any(getattr(c, "writing_the_stops_checkpoint", False)
                                                for c in trainer.callbacks):
            self.send()


class RewardThatSignalsWhileBuilt:
    """A reward whose construction (as a large reward model's loading, in the app's set-up before the fit) signals
    this process with `signame`, then takes `wait_s` more."""

    def __init__(self, signame: str = "SIGTERM", wait_s: float = 30.0, **unused):
        import time

        signal_this_process(signame)
        time.sleep(wait_s)


REWARD_CALLS = {"rank one": 0, "samples": 0, "first": 0}


def signal_the_group_and_never_return() -> None:
    """Inside a reward: waits a second, so that the other rank has gone on past its own call, signals the run's
    process group (every rank, as a scheduler's SIGTERM), and never returns."""
    import time

    time.sleep(1.0)
    os.killpg(os.getpgrp(), signal.SIGTERM)
    time.sleep(3600)


def reward_that_signals_in_its_first_call(prompts, completions, signame: str = "SIGTERM", wait_s: float = 30.0):
    """0 for every completion; its first call since REWARD_CALLS["first"] was set to 0 (the samples drawn before
    training, with callbacks.training_summary on) signals this process with `signame` and then waits `wait_s` (30 s:
    as a reward that does not return would)."""
    import time

    REWARD_CALLS["first"] += 1
    if REWARD_CALLS["first"] == 1:
        signal_this_process(signame)
        time.sleep(wait_s)
    return torch.zeros(len(completions))


def reward_that_interrupts_in_its_first_call(prompts, completions):
    """As reward_that_signals_in_its_first_call, with SIGINT (Ctrl-C) and a call that returns after a second."""
    return reward_that_signals_in_its_first_call(prompts, completions, "SIGINT", wait_s=1.0)


def reward_that_rank_one_abandons(prompts, completions, hung_call: int = 4):
    """0 for every completion; on rank one, its fourth call (the training summary's samples before training, the
    held-out evaluation before training, RL steps 1 and 2), or its `hung_call`-th, signals the group and never
    returns."""
    REWARD_CALLS["rank one"] += 1
    if torch.distributed.get_rank() == 1 and REWARD_CALLS["rank one"] == hung_call:
        signal_the_group_and_never_return()
    return torch.zeros(len(completions))


def reward_that_rank_one_abandons_in_validation(prompts, completions):
    """As reward_that_rank_one_abandons, in its fifth call: the held-out evaluation after RL step 2
    (trainer.val_check_interval=2)."""
    return reward_that_rank_one_abandons(prompts, completions, hung_call=5)


def reward_that_rank_one_abandons_before_training(prompts, completions):
    """As reward_that_rank_one_abandons, in its first call: the training summary's samples, which every rank draws
    in the fit's set-up."""
    return reward_that_rank_one_abandons(prompts, completions, hung_call=1)


def reward_that_rank_zero_abandons_in_the_samples(prompts, completions):
    """0 for every completion; on rank zero, its second call on 2 completions (the held-out samples, which rank zero
    draws alone under DDP, num_samples=2: the start's, then those after RL step 2) signals the group and never
    returns."""
    if torch.distributed.get_rank() == 0 and len(completions) == 2:
        REWARD_CALLS["samples"] += 1
        if REWARD_CALLS["samples"] == 2:
            signal_the_group_and_never_return()
    return torch.zeros(len(completions))


def assert_readable_as_umask_allows(folder) -> None:
    """An exported model folder's files have the modes the user's umask gives new files."""
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir() if p.is_file()}
    assert modes and all(mode == 0o666 & ~umask for mode in modes.values()), modes


def advantages_of(module, rollout):
    """The module's advantages and objective statistics of a rollout, with the step's KL penalty as training_step
    computes it."""
    return module.compute_advantages(rollout, module.kl_penalty(rollout))
