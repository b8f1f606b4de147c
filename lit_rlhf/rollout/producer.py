"""RolloutProducer: the thread that draws rollouts ahead of the trainer in asynchronous mode (algo.max_staleness).

    producer: rollout t drawn with the weights of version max(start, t - S) --> ready[t]
    trainer:  take(t) --> update --> publish(t + 1, weights)

A version is the number of RL steps the weights have been trained for. Rollout t is drawn with version
max(start, t - S), so it is trained at most S versions after the weights that drew it, and exactly S once past the
start: the schedule does not depend on timing. The producer waits for that version rather than discarding work (no
prompt is dropped, none starved), so at most S + 1 rollouts are drawn and not yet trained. S = 0 alternates
strictly, draw then update: the synchronous run, in the same order. After a resume at step `start` the rollouts in
flight are drawn again from the checkpoint's weights (prompts are indexed by step: none skipped, none repeated).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

STOP_TIMEOUT_S = 120.0  # how long stop() waits for a draw in progress (its tools and rewards have their own timeouts)


class ProducerStopped(Exception):
    """The producer was stopped while the trainer waited for a rollout."""


class RolloutProducer:
    """draw(step, version) -> a rollout, run in a thread; load(version, weights) before drawing with a version
    the sampler does not hold yet. stop_after: the first step not to draw (the run's last RL step + 1), or None."""

    def __init__(self, draw: Callable[[int, int], Any], load: Callable[[int, Any], None], max_staleness: int,
                 start: int, weights: Any, stop_after: int | None = None):
        self.draw_fn, self.load_fn, self.max_staleness = draw, load, max_staleness
        self.start, self.stop_after = start, stop_after
        self.published: dict[int, Any] = {start: weights}  # version -> the trained weights of that version
        self.ready: dict[int, Any] = {}  # step -> drawn rollout
        self.loaded: int | None = None  # the version the sampler holds
        self.error: BaseException | None = None
        self.stopping = False
        self.changed = threading.Condition()
        self.sampling = threading.RLock()  # held while drawing; paused() takes it (held-out sampling, checks)
        self.producer_wait_s = self.trainer_wait_s = 0.0  # since the last pop_stats()
        self.stats_since = time.perf_counter()
        self.thread = threading.Thread(target=self.run, name="lit-rlhf-rollout-producer", daemon=True)

    def version_for(self, step: int) -> int:
        return max(self.start, step - self.max_staleness)

    def begin(self) -> RolloutProducer:
        self.thread.start()
        return self

    # ---- producer thread --------------------------------------------------------------------
    def run(self) -> None:
        step = self.start
        try:
            while self.stop_after is None or step < self.stop_after:
                version = self.version_for(step)
                weights = self.wait_for_version(version)
                if weights is None:
                    return  # stopped
                with self.sampling:
                    if self.loaded != version:
                        self.load_fn(version, weights)
                        self.loaded = version
                    drawn = self.draw_fn(step, version)
                with self.changed:
                    self.ready[step] = drawn
                    self.changed.notify_all()
                step += 1
        except BaseException as err:  # handed to the trainer, which raises it at its next take()
            with self.changed:
                self.error = err
                self.changed.notify_all()

    def wait_for_version(self, version: int) -> Any:
        start = time.perf_counter()
        with self.changed:
            while version not in self.published and not self.stopping:
                self.changed.wait()
            self.producer_wait_s += time.perf_counter() - start
            if self.stopping:
                return None
            for old in [v for v in self.published if v < version]:
                del self.published[old]  # no later rollout is drawn with an older version
            return self.published[version]

    # ---- trainer thread ---------------------------------------------------------------------
    def take(self, step: int) -> Any:
        """Rollout `step`, waiting for it; the producer's error (e.g. a reward's one-line error) is raised here."""
        start = time.perf_counter()
        with self.changed:
            while step not in self.ready and self.error is None and not self.stopping:
                self.changed.wait()
            self.trainer_wait_s += time.perf_counter() - start
            if step in self.ready:
                return self.ready.pop(step)
            if self.error is not None:
                raise self.error
            raise ProducerStopped(f"the rollout producer stopped before rollout {step}")

    def publish(self, version: int, weights: Any) -> None:
        """The trainer's weights after `version` RL steps, for the rollouts drawn with them."""
        with self.changed:
            self.published[version] = weights
            self.changed.notify_all()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No draw runs inside (the sampler's engine and the random state are the caller's meanwhile)."""
        with self.sampling:
            yield

    def pop_stats(self) -> dict[str, float]:
        """async/producer_idle_frac, async/trainer_idle_frac: the share of the time since the last call each side
        waited for the other (the producer for a version to draw with, the trainer for a rollout)."""
        now = time.perf_counter()
        with self.changed:
            elapsed = max(now - self.stats_since, 1e-9)
            stats = {"async/producer_idle_frac": min(self.producer_wait_s / elapsed, 1.0),
                     "async/trainer_idle_frac": min(self.trainer_wait_s / elapsed, 1.0),
                     "async/rollouts_ready": float(len(self.ready))}
            self.producer_wait_s = self.trainer_wait_s = 0.0
            self.stats_since = now
        return stats

    def stop(self) -> bool:
        """Stops the thread after the draw in progress; True when it ended within STOP_TIMEOUT_S."""
        with self.changed:
            self.stopping = True
            self.changed.notify_all()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(STOP_TIMEOUT_S)
        return not self.thread.is_alive()
