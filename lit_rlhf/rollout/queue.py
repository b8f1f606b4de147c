"""The queue every training rollout comes through (algo.max_staleness = S): `next(batch, step, timings)` is the draw
RL step `step` trains on. At S = 0 (and without the setting) the Sampler draws the DataLoader's batch when the
trainer trains it: the synchronous run. At S >= 1 a producer thread draws the coming rollouts (the engine's
episodes, their tools and the reward) while the trainer updates, reading the prompt batches ahead from the
DataLoader's own dataset; each one it hands over is checked against the DataLoader's batch of that step. An
RLHFModule's `rollout_queue` (RolloutQueue) runs it; the thread is rollout/producer.py. The queue is given what it
uses (the module's Sampler, its settings, the trainer at the start of training), never the module.

The producer samples with its own copy of the policy (LoRA: the adapters only, the frozen base is shared), into
which each version's trained weights are copied when the producer first needs them; an engine that holds its own
weights (rollout=vllm) is fed from that copy. Every copy is verified: the copy's logprobs of a fixed probe sequence
must equal the trainer's at that version. A rollout drawn S > 0 versions ago carries the sampler's own logprobs (the
engine's, or the copy's forward with rollout=hf), so the update corrects for the lag (algo.async_correction).

Shapes: N sequences, P prompt length, R response length.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_rlhf.config.validation import warn_once
from lit_rlhf.data.datamodule import batch_to
from lit_rlhf.errors import ConfigError
from lit_rlhf.interrupts import TrainingAborted, abandonable
from lit_rlhf.models.forwards import batched_logprobs
from lit_rlhf.rollout.producer import RolloutProducer
from lit_rlhf.rollout.sampler import Drawn, Sampler

PROBE_TOLERANCE = 1e-3  # the copy's probe logprobs against the trainer's (same weights, same code: equal)


def draw_stream(seed: int, step: int, rank: int, device: torch.device) -> torch.Generator:
    """The random stream of rollout `step` on `rank` at S >= 1: a function of the run's draw seed and the step, so
    that neither the trainer's sampling beside the producer nor the threads' timing changes what a draw samples."""
    generator = torch.Generator(device=device)
    return generator.manual_seed(((seed * 1_000_003 + step) * 131 + rank) % 2**63)


def sampler_copy(policy: torch.nn.Module, trained: list[torch.nn.Parameter]) -> torch.nn.Module:
    """A copy of the policy whose trained tensors are its own and whose frozen ones (a LoRA base) are shared."""
    trained_ids = {id(p) for p in trained}
    shared = {id(p): p for p in policy.parameters() if id(p) not in trained_ids}
    return copy.deepcopy(policy, shared).eval()


INTERRUPTED_STOP_S = 2.0  # how long an interrupted run waits for the producer's draw in progress


class StopProducerOnException(L.Callback):
    """Lightning calls no module hook when a step raises, only callbacks' on_exception: the producer stops there."""

    def __init__(self, queue: RolloutQueue):
        self.queue = queue

    def on_exception(self, trainer: L.Trainer, module: Any, exception: BaseException) -> None:
        # after an interrupt the draw in progress may be the call that never returns: no long wait for it
        interrupted = isinstance(exception, (KeyboardInterrupt, SIGTERMException, TrainingAborted))
        self.queue.stop(wait_s=INTERRUPTED_STOP_S if interrupted else None)


def prompt_source(trainer: L.Trainer) -> Any:
    """Where the producer reads prompt batches ahead: the training DataLoader's dataset (a PromptStream, whose
    batch(step) is the batch the DataLoader yields at that step), else the datamodule's stream."""
    dataset = getattr(trainer.train_dataloader, "dataset", None)
    return dataset if callable(getattr(dataset, "batch", None)) else trainer.datamodule.prompt_stream()


@dataclass(frozen=True)
class QueueSettings:
    """The algo.* settings the queue draws with."""

    max_staleness: int | None  # S; None or 0: the synchronous run
    async_draws: int  # rollouts the producer draws at once
    samples_per_prompt: int  # K
    temperature: float  # of the stale rollouts' own logprobs (rollout=hf) and the probe's
    forward_batch_size: int | None
    logits_chunk_size: int | None

    @classmethod
    def of(cls, hparams: Any, samples_per_prompt: int) -> QueueSettings:
        """From an RLHF module's hyper-parameters and its K."""
        return cls(hparams.max_staleness, hparams.async_draws, samples_per_prompt, hparams.temperature,
                   hparams.forward_batch_size, hparams.logits_chunk_size)


def check_concurrent_draws(config: Any, engine: Any) -> None:
    """At construction, before an engine starts: several draws at once need an engine that holds several weights."""
    draws = getattr(config, "async_draws", 1)
    if getattr(config, "max_staleness", None) is not None and draws > 1 and not engine.concurrent_draws:
        raise ConfigError(f"algo.async_draws={draws} draws rollouts with different weights at once, "
                          f"and this rollout engine holds one set of weights (rollout=vllm); set algo.async_draws=1 "
                          f"or use rollout=hf.")


class RolloutQueue:
    """The training rollouts of one module: drawn now at S = 0, or by the producer at S >= 1, with its samplers (one
    per concurrent draw, each with its copy of the policy) and the weights they draw with.

    sampler: the module's Sampler (its engine, and its context: the trainer's policy, device and rank once the
    weights are loaded); the trainer, the first step and the last are given at `start`."""

    def __init__(self, sampler: Sampler, settings: QueueSettings):
        self.sampler, self.settings = sampler, settings
        self.trainer: L.Trainer | None = None  # while the producer runs
        self.pad_id: int | None = None  # algo.padding_free: the pad token of the stale rollouts' forwards
        self.producer: RolloutProducer | None = None
        self.draw_seed: int | None = None  # S >= 1: the seed of every draw's own random stream (kept in checkpoints)
        self.probe: tuple[torch.Tensor, ...] | None = None  # one drawn sequence whose logprobs verify every copy
        self.staleness_seen: list[int] = []
        self.samplers: list[Any] = []  # one Sampler per worker, each with its own copy of the policy
        self.guard: StopProducerOnException | None = None

    @property
    def enabled(self) -> bool:
        """Whether a producer draws ahead (S >= 1); S = 0 is the synchronous run."""
        return bool(self.settings.max_staleness)

    def check(self, datamodule: Any, sharded: bool) -> None:
        """Before any work: drawing ahead needs prompts it can read ahead and a rollout the producer can run alone
        (sharded: the models are sharded over the ranks, trainer=fsdp2)."""
        if not self.enabled:
            return
        engine = self.sampler.engine
        setting = f"algo.max_staleness={self.settings.max_staleness}"
        if engine.shared_by_ranks and engine.lockstep:
            raise ConfigError(f"{setting} with rollout=vllm_server needs one training process: with several ranks "
                              f"rank zero syncs the servers while the others wait, which a producer beside each "
                              f"rank's trainer cannot; drop algo.max_staleness or train with one process.")
        if sharded or engine.lockstep:
            raise ConfigError(f"{setting} needs trainer=ddp or one process: trainer=fsdp2 gathers the sharded weights "
                              f"for every rollout with all ranks, which a producer beside the trainer cannot; drop "
                              f"algo.max_staleness or use trainer=ddp.")
        if not callable(getattr(datamodule, "prompt_stream", None)):
            raise ConfigError(f"{setting} reads prompt batches ahead of the trainer from a PromptDataModule (its "
                              f"prompt_stream()); train with lit_rlhf's PromptDataModule or drop algo.max_staleness.")

    # ---- lifetime ---------------------------------------------------------------------------
    def start(self, trainer: L.Trainer, step: int, stop_after: int | None, pad_id: int | None) -> None:
        """At the start of training (after a resume restored the random states): the thread starts drawing at RL
        step `step` and draws none from `stop_after` on (None: until stopped)."""
        if not self.enabled or self.producer is not None:
            return
        staleness, policy = self.settings.max_staleness, self.sampler.context.policy
        self.trainer, self.pad_id = trainer, pad_id
        self.stream = prompt_source(trainer)
        if self.draw_seed is None:
            self.draw_seed = int(torch.randint(2**62, (1,)))  # from the seeded default generator, once per run
        if not self.sampler.engine.takes_random_stream():
            warn_once(f"algo.max_staleness={staleness}: this rollout engine samples from torch's "
                      f"default random generator, which the trainer's thread shares, so the same seed will not give "
                      f"the same run; rollout.token_sampler=inverse_cdf without top_k/top_p-style generation_kwargs "
                      f"(or rollout=vllm with rollout.seeded=true) draws each rollout from a stream of its own.")
        trained = [p for p in policy.parameters() if p.requires_grad]
        self.probe = None  # (queries, query_mask, responses, forward_mask) of one sequence, set by the first draw
        self.staleness_seen = []
        self.producer = RolloutProducer(self.draw_ahead, self.load_version, staleness, start=step,
                                        weights=self.trained_snapshot(), stop_after=stop_after,
                                        draws=self.settings.async_draws)
        # one copy per worker: the rollouts drawn at once sample with different versions
        self.samplers = [self.sampler.for_worker(sampler_copy(policy, trained)) for _ in self.producer.threads]
        self.guard = StopProducerOnException(self)
        trainer.callbacks.append(self.guard)
        self.producer.begin()

    def stop(self, wait_s: float | None = None) -> None:
        """Stops the producer's workers, waiting up to wait_s (None: the producer's STOP_TIMEOUT_S) for a draw in
        progress; one that goes on is a daemon thread and ends with the process."""
        producer, self.producer = self.producer, None
        trainer, self.trainer = self.trainer, None
        if self.guard is not None and trainer is not None and self.guard in trainer.callbacks:
            trainer.callbacks.remove(self.guard)
        if producer is not None and not producer.stop(wait_s) and wait_s is None:  # an interrupt expects it
            rank_zero_warn("the rollout producer did not stop within its timeout (a tool or reward that does not "
                           "return); it is a daemon thread and ends with the process.")

    # ---- producer thread --------------------------------------------------------------------
    def trained_snapshot(self) -> dict[str, Any]:
        """The policy's trained tensors now (detached copies) and the trainer's logprobs of the probe with them."""
        policy = self.sampler.context.policy  # the trainer's
        trained = {name: p.detach().clone() for name, p in policy.named_parameters() if p.requires_grad}
        return {"tensors": trained, "probe": self.probe_logprobs(policy)}

    def probe_logprobs(self, policy: torch.nn.Module) -> torch.Tensor | None:
        if self.probe is None:
            return None
        was_training = policy.training
        policy.eval()
        try:
            return batched_logprobs(policy, *self.probe, self.settings.temperature)  # 1,R
        finally:
            policy.train(was_training)

    def copy_into_sampler(self, weights: dict[str, Any], slot: int = 0) -> None:
        """The trained tensors of a version into a worker's copy of the policy."""
        params = dict(self.samplers[slot].context.policy.named_parameters())
        missing = sorted(set(weights["tensors"]) - set(params))
        if missing:
            raise ConfigError(f"the sampler's copy of the policy has no tensor {missing[0]!r}; the copy and the "
                              f"policy differ in structure, so async mode cannot sync it.")
        with torch.no_grad():
            for name, tensor in weights["tensors"].items():
                params[name].copy_(tensor)

    def load_version(self, version: int, weights: dict[str, Any], slot: int) -> None:
        """The weights of `version` into a worker's copy, verified by the probe; an engine with weights of its
        own (rollout=vllm) takes them from the copy before its next draw."""
        self.copy_into_sampler(weights, slot)
        sampling = self.samplers[slot].context
        self.sampler.engine.after_update(sampling)  # rollout=vllm: its weights are now the copy's
        if weights["probe"] is None:
            return
        copied = self.probe_logprobs(sampling.policy)
        error = float((copied - weights["probe"]).abs().max())
        if not error <= PROBE_TOLERANCE:
            raise ConfigError(f"RL step {version}: the weight sync to the rollout producer failed: its copy of the "
                              f"policy gives the probe sequence logprobs {error:.3g} away from the trainer's (more "
                              f"than {PROBE_TOLERANCE:g}), so it would sample another policy; the checkpoints written "
                              f"so far are intact.")

    def draw_ahead(self, step: int, version: int, slot: int) -> Any:
        """Rollout `step` drawn with weights `version` (in the worker's slot), scored, with the sampler's logprobs
        when it is stale."""
        settings, sampler = self.settings, self.samplers[slot]
        device = sampler.context.device
        batch = batch_to(self.stream.batch(step), device)
        timings: dict[str, float] = {}
        sampler.context.random_stream = draw_stream(self.draw_seed, step, sampler.context.rank, device)
        # a reward that waits (a server, a judge) goes on in its thread while the producer draws the next rollout
        drawn = sampler.draw(batch, settings.samples_per_prompt, version, timings=timings)
        drawn.version, drawn.staleness, drawn.timings = version, step - version, timings
        samples = drawn.samples
        if drawn.staleness > 0 and samples.sampler_logprobs is None:  # rollout=hf: the copy's own forward
            logprobs = batched_logprobs(sampler.context.policy, samples.queries, samples.query_mask,
                                        samples.responses, samples.forward_mask, settings.temperature,
                                        settings.forward_batch_size, settings.logits_chunk_size, self.pad_id)
            samples.sampler_logprobs = logprobs * samples.response_mask  # N,R  zero on observation tokens
        if self.probe is None:
            self.probe = tuple(t[:1].clone() for t in (samples.queries, samples.query_mask, samples.responses,
                                                       samples.forward_mask))
        return drawn

    # ---- trainer thread ---------------------------------------------------------------------
    def next(self, batch: dict[str, torch.Tensor], step: int, timings: dict[str, float],
             samples_per_prompt: int | None = None) -> Drawn:
        """The draw RL step `step` trains on: the Sampler's draw of `batch` now (S = 0; samples_per_prompt: K if not
        the algorithm's), or the producer's draw of the same batch, made ahead (S >= 1). Its sampling and scoring
        times are added to `timings`."""
        if self.producer is None:
            k = samples_per_prompt or self.settings.samples_per_prompt
            return self.sampler.draw(batch, k, step, timings=timings)
        drawn = self.take(batch, step)
        for key, value in drawn.timings.items():
            timings[key] = timings.get(key, 0.0) + value
        return drawn

    def take(self, batch: dict[str, torch.Tensor], step: int) -> Drawn:
        """The draw of RL step `step` (S >= 1): the producer's draw of the DataLoader's `batch`, its timings in
        `drawn.timings`. (At S = 0 the module draws it itself.)"""
        with abandonable("the rollout producer (its sampling, reward, tools and environment)"):
            drawn = self.producer.take(step)
        if not torch.equal(drawn.samples.queries[::self.settings.samples_per_prompt],
                           batch["input_ids"].to(drawn.samples.queries.device)):
            raise ConfigError(f"RL step {step}: the rollout producer drew other prompts than the "
                              f"DataLoader's batch of this step; train with the PromptDataModule's DataLoader (its "
                              f"batches are a function of the step), or drop algo.max_staleness.")
        self.staleness_seen.append(drawn.staleness)
        return drawn

    def weights_updated(self) -> None:
        """After an RL step's optimizer steps: the synchronous run's engine takes the new weights now; with a
        producer (S >= 1) its copies load them by version (publish_after_step, load_version). Every weight the
        engine receives comes through this class."""
        if self.producer is None:
            self.sampler.engine.after_update(self.sampler.context)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Around a rollout the trainer draws itself (held-out, samples): the producer, if one runs, waits
        meanwhile."""
        if self.producer is None:
            yield
            return
        with self.producer.paused():
            try:
                yield
            finally:
                self.sampler.engine.after_update(self.samplers[0].context)  # its weights are the trainer's now

    def publish_after_step(self, version: int) -> None:
        """After an RL step: its weights, `version` (the RL steps trained), for the rollouts drawn with them."""
        if self.producer is not None:
            self.producer.publish(version, self.trained_snapshot())

    def stats(self, policy_version: int | None, rl_step: int) -> dict[str, torch.Tensor]:
        """async/*: the staleness of the rollout trained at `rl_step` (versions between the weights that drew it,
        `policy_version`, and the trainer's), its running mean and max, how far the producer's weights trail the
        trainer's, idle fractions."""
        if self.producer is None or policy_version is None:
            return {}
        seen = self.staleness_seen
        loaded = self.producer.loaded if self.producer.loaded is not None else policy_version
        stats = {"async/staleness": float(rl_step - policy_version),
                 "async/staleness_mean": sum(seen) / len(seen), "async/staleness_max": float(max(seen)),
                 "async/version_lag": float(rl_step - loaded), **self.producer.pop_stats()}
        return {key: torch.tensor(value) for key, value in stats.items()}
