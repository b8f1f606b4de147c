"""The rollout queue (lit_rlhf/rollout/queue.py) and asynchronous mode (algo.max_staleness): S=0 is the synchronous
run bit for bit, S>0 trains each rollout exactly S versions after the weights that drew it with the sampler's logprobs
as the behaviour policy, the weight sync is verified, and no thread outlives a run."""

import functools
import json
import tempfile
import threading
import warnings

import lightning as L
import pytest
import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.models.forwards import batched_logprobs
from lit_rlhf.ops import importance_weights
from lit_rlhf.rollout.queue import QueueSettings, RolloutQueue
from tests.conftest import make_datamodule, make_ppo, make_rloo

SGD = functools.partial(torch.optim.SGD, lr=0.5)  # large steps: every version's logprobs differ


class Record(L.Callback):
    def __init__(self):
        self.stats = []

    def on_train_batch_end(self, trainer, module, *args):
        self.stats.append(dict(module.last_stats))


def fit(module, rl_steps=3, callbacks=(), validate=False):
    """validate: held-out validation after every RL step, and the samples callback's completions at every step
    (returned in the stats, under "samples")."""
    from lightning.pytorch.callbacks import Checkpoint

    from lit_rlhf.callbacks import GenerationSamples

    L.seed_everything(0)
    record = Record()
    folder = tempfile.TemporaryDirectory() if validate else None  # the samples file, read back below
    samples = GenerationSamples(num_samples=4, every_n_steps=1, dirpath=folder.name) if validate else None
    trainer = L.Trainer(max_steps=rl_steps * module.optimizer_steps_per_rl_step, logger=False,
                        enable_checkpointing=any(isinstance(c, Checkpoint) for c in callbacks),
                        enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=1 if validate else 0, val_check_interval=1, accelerator="cpu",
                        callbacks=[record, *callbacks, *([samples] if samples else [])])
    trainer.fit(module, make_datamodule())
    if samples is not None:
        with folder, samples.path(trainer).open() as lines:
            record.stats.append({"samples": [json.loads(line) for line in lines]})
    weights = {k: v.detach().clone() for k, v in module.state_dict().items() if k in module.trained_state_keys()}
    return weights, record.stats


def producer_threads():
    return [t for t in threading.enumerate() if t.name.startswith("lit-rlhf-rollout-producer") and t.is_alive()]


def comparable(stats):
    return [{k: v for k, v in step.items() if not k.startswith(("time/", "async/")) and k != "eps"} for step in stats]


@pytest.mark.integration
@pytest.mark.parametrize("make", [make_rloo, make_ppo], ids=["rloo", "ppo"])
def test_staleness_0_is_the_synchronous_run_bit_for_bit(make):
    """S = 0 draws each rollout from the DataLoader's batch when the trainer trains it: no producer starts."""
    threads = []

    class Threads(L.Callback):
        def on_train_batch_end(self, *args):
            threads.append(len(producer_threads()))

    sync_weights, sync_stats = fit(make(optimizer=SGD))
    async_weights, async_stats = fit(make(optimizer=SGD, max_staleness=0), callbacks=[Threads()])
    assert comparable(async_stats) == comparable(sync_stats)  # every metric, to the last digit
    assert sync_weights.keys() == async_weights.keys()
    for name, weight in sync_weights.items():
        assert torch.equal(weight, async_weights[name]), name
    assert threads == [0] * 3 and not any(key.startswith("async/") for s in async_stats for key in s)


@pytest.mark.integration
@pytest.mark.parametrize("draws", [1, 2])
def test_the_same_seed_gives_the_same_run_at_staleness_1(draws):
    """Each draw samples from its own random stream (from the seed, the RL step and the rank), so neither the
    trainer's sampling beside it nor the threads' timing changes what it draws."""
    runs = [fit(make_rloo(optimizer=SGD, max_staleness=1, async_draws=draws), rl_steps=4, validate=True)
            for _ in range(2)]
    (first_weights, first_stats), (second_weights, second_stats) = runs
    assert comparable(first_stats[:-1]) == comparable(second_stats[:-1])
    assert first_stats[-1] == second_stats[-1]
    for name, weight in first_weights.items():
        assert torch.equal(weight, second_weights[name]), name


@pytest.mark.integration
def test_a_sampler_without_a_stream_of_its_own_says_the_run_will_not_repeat(monkeypatch):
    from lit_rlhf.config import validation
    from lit_rlhf.rollout import HFEngine

    monkeypatch.setattr(validation, "_warned", set())
    with pytest.warns(UserWarning, match=r"algo.max_staleness=1: this rollout engine samples from torch's default "
                                         r"random generator.*the same seed will not give the same run"):
        fit(make_rloo(max_staleness=1, rollout_engine=HFEngine(token_sampler="generate")), rl_steps=1)
    with warnings.catch_warnings(record=True) as caught:  # the default sampler draws from the draw's own stream
        warnings.simplefilter("always")
        fit(make_rloo(max_staleness=1), rl_steps=1)
    assert not [w for w in caught if "will not give the same run" in str(w.message)]


@pytest.mark.integration
@pytest.mark.parametrize("draws", [1, 3])
def test_each_rollout_is_trained_s_versions_after_the_weights_that_drew_it(monkeypatch, draws):
    """S=2: rollout t is drawn with version max(0, t - 2). The sampler logprobs a stale rollout carries are those of
    the weights of that version (kept from the trainer at each step), and its importance weights are
    min(pi_old / pi_sampler, cap) with pi_old the trainer's current policy (the decoupled correction). With three
    rollouts drawn at once each worker's copy holds the version it draws with."""
    module = make_rloo(optimizer=SGD, max_staleness=2, reuse_rollout_forward=False, async_draws=draws)
    versions, checked = {}, []

    class KeepWeights(L.Callback):  # the trainer's policy at every version, to recompute what the sampler saw
        def on_train_start(self, trainer, module):
            versions[0] = {n: p.detach().clone() for n, p in module.policy.named_parameters()}

        def on_train_batch_end(self, trainer, module, *args):
            versions[module.rl_step] = {n: p.detach().clone() for n, p in module.policy.named_parameters()}

    finish = module.finish_rollout

    def checking_finish(drawn, for_training):
        rollout = finish(drawn, for_training)
        samples = drawn.samples
        assert drawn.version == max(0, module.rl_step - 2) and drawn.staleness == module.rl_step - drawn.version
        if drawn.staleness == 0:
            assert samples.sampler_logprobs is None and rollout.is_weights is None
        else:
            now = {n: p.detach().clone() for n, p in module.policy.named_parameters()}
            module.policy.load_state_dict(versions[drawn.version], strict=False)
            module.policy.eval()
            behaviour = batched_logprobs(module.policy, samples.queries, samples.query_mask, samples.responses,
                                         samples.response_mask, module.hparams.temperature)
            module.policy.load_state_dict(now, strict=False)
            module.policy.train()
            torch.testing.assert_close(samples.sampler_logprobs, behaviour, atol=1e-5, rtol=0)
            expected = importance_weights(rollout.logprobs, behaviour, samples.response_mask, 2.0)
            torch.testing.assert_close(rollout.is_weights, expected, atol=1e-4, rtol=1e-4)
            assert (rollout.logprobs - behaviour).abs().max() > 1e-3  # the versions differ: a real correction
        checked.append(drawn.staleness)
        return rollout

    monkeypatch.setattr(module, "finish_rollout", checking_finish)
    _, stats = fit(module, rl_steps=5, callbacks=[KeepWeights()])
    assert checked == [0, 1, 2, 2, 2]
    assert [s["async/staleness"] for s in stats] == [0.0, 1.0, 2.0, 2.0, 2.0]
    assert stats[-1]["async/staleness_max"] == 2.0 and stats[-1]["async/staleness_mean"] == pytest.approx(7 / 5)
    assert "rollout/sampler_kl" in stats[-1] and 0 <= stats[-1]["async/trainer_idle_frac"] <= 1
    assert not producer_threads()


@pytest.mark.integration
def test_behaviour_correction_clips_around_the_sampler_and_has_no_importance_weight(monkeypatch):
    module = make_rloo(optimizer=SGD, max_staleness=1, async_correction="behaviour")
    finish = module.finish_rollout
    seen = []

    def checking_finish(drawn, for_training):
        rollout = finish(drawn, for_training)
        if drawn.staleness:
            assert torch.equal(rollout.logprobs, drawn.samples.sampler_logprobs) and rollout.is_weights is None
            seen.append(drawn.staleness)
        return rollout

    monkeypatch.setattr(module, "finish_rollout", checking_finish)
    _, stats = fit(module)
    assert seen == [1, 1] and stats[-1]["val/ratio"] != 1.0  # the first update's ratio is against the sampler
    # the lag metrics compare the sampler with the trainer's current weights, not with themselves
    assert stats[-1]["rollout/sampler_kl"] > 0 and stats[-1]["rollout/logprob_diff_max"] > 0


@pytest.mark.integration
def test_a_weight_sync_that_does_not_reach_the_sampler_stops_the_run_with_one_line(monkeypatch):
    """An adapter that never reaches the sampler: its copy keeps the initial weights. The probe sees it at the
    first version after the first update, instead of training on samples of the initial policy."""
    monkeypatch.setattr(RolloutQueue, "copy_into_sampler", lambda self, weights, slot=0: None)
    with pytest.raises(ConfigError, match=r"RL step 1: the weight sync to the rollout producer failed") as err:
        fit(make_rloo(optimizer=SGD, max_staleness=1))
    assert "\n" not in str(err.value)
    assert not producer_threads()


@pytest.mark.integration
def test_a_failing_step_leaves_no_producer_thread(monkeypatch):
    module = make_rloo(max_staleness=2)

    def failing_update(rollout, advantages):
        raise RuntimeError("update failed")

    monkeypatch.setattr(module, "update", failing_update)
    with pytest.raises(RuntimeError, match="update failed"):
        fit(module)
    assert not producer_threads()


@pytest.mark.parametrize("value, message", [
    (-1, "algo.max_staleness=-1 must be >= 0"),
    (1.5, "algo.max_staleness=1.5 must be a whole number"),
])
def test_a_bad_staleness_bound_is_one_line(value, message):
    with pytest.raises(ConfigError, match=message):
        make_rloo(max_staleness=value)


def test_concurrent_draws_with_an_engine_of_one_set_of_weights_are_refused_before_it_starts():
    from lit_rlhf.rollout import VLLMEngine

    engine = VLLMEngine()  # vLLM need not be installed: the refusal comes before the engine would start
    with pytest.raises(ConfigError, match=r"algo.async_draws=2 draws rollouts with different weights at once"):
        make_rloo(max_staleness=1, async_draws=2, rollout_engine=engine)
    assert engine.engine is None
    make_rloo(async_draws=2, rollout_engine=engine)  # synchronous: one draw at a time, async_draws idle


@pytest.mark.integration
def test_async_mode_needs_a_prompt_datamodule():
    module = make_rloo(max_staleness=1)
    datamodule = make_datamodule()
    datamodule.setup()
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    with pytest.raises(ConfigError, match="reads prompt batches ahead of the trainer from a PromptDataModule"):
        trainer.fit(module, train_dataloaders=datamodule.train_dataloader())
    assert not producer_threads()


@pytest.mark.integration
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_ctrl_c_and_sigterm_stop_the_producer_and_leave_a_checkpoint_that_resumes(signame, tmp_path):
    import os
    import signal

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from lit_rlhf.callbacks import CheckpointOnInterrupt

    class SignalAt(L.Callback):
        def on_train_batch_end(self, trainer, module, *args):
            if module.rl_step == 2:
                os.kill(os.getpid(), getattr(signal, signame))

    guard = CheckpointOnInterrupt(dirpath=str(tmp_path))
    if signame == "SIGTERM":
        with pytest.raises(SIGTERMException):
            fit(make_rloo(max_staleness=2), rl_steps=5, callbacks=[SignalAt(), guard])
    else:
        _, stats = fit(make_rloo(max_staleness=2), rl_steps=5, callbacks=[SignalAt(), guard])
        assert len(stats) == 2
    assert guard.path == tmp_path / "interrupted.ckpt" and not producer_threads()

    L.seed_everything(0)
    module, record = make_rloo(max_staleness=2), Record()
    trainer = L.Trainer(max_steps=5, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu", callbacks=[record])
    trainer.fit(module, make_datamodule(), ckpt_path=str(guard.path))
    assert module.rl_step == 5 and len(record.stats) == 3  # steps 3-5, from the checkpoint's weights
    assert [s["async/staleness"] for s in record.stats] == [0.0, 1.0, 2.0] and not producer_threads()


@pytest.mark.integration
def test_the_producer_draws_the_dataloader_s_batch_of_each_step(monkeypatch):
    """At S >= 1 the producer reads the prompt batches ahead from the training DataLoader's dataset; a rollout whose
    prompts are not the DataLoader's batch of its step is refused."""
    import lit_rlhf.rollout.queue as queue

    read_from = []
    dataloader_source = queue.prompt_source

    def recorded(trainer):
        read_from.append(dataloader_source(trainer) is trainer.train_dataloader.dataset)
        return dataloader_source(trainer)

    monkeypatch.setattr(queue, "prompt_source", recorded)
    fit(make_rloo(max_staleness=1), rl_steps=2)
    assert read_from == [True]

    class OneAhead:
        def __init__(self, stream):
            self.stream = stream

        def batch(self, step):
            return self.stream.batch(step + 1)

    monkeypatch.setattr(queue, "prompt_source", lambda trainer: OneAhead(dataloader_source(trainer)))
    with pytest.raises(ConfigError, match=r"RL step 0: the rollout producer drew other prompts than the DataLoader's"):
        fit(make_rloo(max_staleness=1), rl_steps=2)
    assert not producer_threads()


class Untouched:
    """A sampler the queue must not reach into while it hands over a draw."""

    def __getattr__(self, name):
        raise AssertionError(f"the queue read sampler.{name}")


def queue_settings(max_staleness=1, samples_per_prompt=2) -> QueueSettings:
    return QueueSettings(max_staleness, async_draws=1, samples_per_prompt=samples_per_prompt, temperature=1.0,
                         forward_batch_size=None, logits_chunk_size=None)


def test_the_queue_hands_the_producer_s_draw_to_the_trainer_without_calling_the_sampler():
    from types import SimpleNamespace

    queries = torch.tensor([[5, 6], [5, 6], [7, 8], [7, 8]])  # 2 prompts x K=2
    drawn = SimpleNamespace(samples=SimpleNamespace(queries=queries), staleness=1, timings={"time/x": 0.5})
    queue = RolloutQueue(Untouched(), queue_settings(samples_per_prompt=2))
    queue.producer = SimpleNamespace(take=lambda step: drawn if step == 3 else None)
    assert queue.take({"input_ids": queries[::2]}, step=3) is drawn
    assert queue.staleness_seen == [1]
    with pytest.raises(ConfigError, match="RL step 3: the rollout producer drew other prompts"):
        queue.take({"input_ids": queries[1::2] + 1}, step=3)


def test_the_engine_takes_new_weights_from_the_queue_only_in_the_synchronous_run():
    from types import SimpleNamespace

    synced = []
    sampler = SimpleNamespace(engine=SimpleNamespace(after_update=synced.append),
                              context="the trainer's sampling context")
    queue = RolloutQueue(sampler, queue_settings(max_staleness=None))
    queue.weights_updated()
    assert synced == ["the trainer's sampling context"]
    queue.producer = object()  # S >= 1: the producer's copies load versions instead
    queue.weights_updated()
    assert len(synced) == 1


def test_async_drawing_from_servers_shared_by_several_ranks_is_refused_in_one_line():
    """rollout=vllm_server under trainer=ddp: rank zero syncs the servers while the other ranks wait, which a producer
    beside each rank's trainer cannot do; the check says so before any draw."""
    from types import SimpleNamespace

    from lit_rlhf.rollout.vllm_server import VLLMServerEngine

    engine = VLLMServerEngine(urls=["http://127.0.0.1:9"])
    engine.lockstep = True  # what the strategies' setup sets for this engine with 2 ranks
    with pytest.raises(ConfigError, match=r"^algo.max_staleness=1 with rollout=vllm_server needs one training "
                                          r"process: .*; drop algo.max_staleness or train with one process\.$"):
        RolloutQueue(SimpleNamespace(engine=engine), queue_settings(max_staleness=1)).check(None, sharded=False)


def test_next_is_the_sampler_s_draw_now_at_s_0_and_the_producer_s_with_its_timings_at_s_1():
    from types import SimpleNamespace

    queries = torch.tensor([[5, 6], [5, 6]])  # 1 prompt x K=2
    calls = []

    def draw(batch, k, version, timings=None):
        calls.append((k, version))
        timings["time/sample_s"] = 1.0
        return "drawn now"

    queue = RolloutQueue(SimpleNamespace(draw=draw), queue_settings(max_staleness=None, samples_per_prompt=2))
    timings = {}
    assert queue.next({"input_ids": queries[:1]}, step=4, timings=timings) == "drawn now"
    assert queue.next({"input_ids": queries[:1]}, step=5, timings=timings, samples_per_prompt=3) == "drawn now"
    assert calls == [(2, 4), (3, 5)] and timings == {"time/sample_s": 1.0}

    ahead = SimpleNamespace(samples=SimpleNamespace(queries=queries), staleness=1, timings={"time/sample_s": 0.5})
    queue.producer = SimpleNamespace(take=lambda step: ahead)
    assert queue.next({"input_ids": queries[:1]}, step=6, timings=timings) is ahead
    assert len(calls) == 2 and timings == {"time/sample_s": 1.5} and queue.staleness_seen == [1]
