"""RolloutProducer: the threads that draw rollouts ahead of the trainer in asynchronous mode (algo.max_staleness).

    producer: rollout t drawn with the weights of version max(start, t - S) --> ready[t]
    trainer:  take(t) --> update --> publish(t + 1, weights)

A version is the number of RL steps the weights have been trained for. Rollout t is drawn with version
max(start, t - S), so it is trained at most S versions after the weights that drew it, and exactly S once past the
start: the schedule does not depend on timing. The producer waits for that version rather than discarding work (no
prompt is dropped, none starved), so at most S + 1 rollouts are drawn and not yet trained. (S = 0 would alternate
strictly, draw then update; a module draws those rollouts itself, without a producer.) After a resume at step
`start` the rollouts in flight are drawn again from the checkpoint's weights (prompts are indexed by step: none
skipped, none repeated).

`draws` workers (algo.async_draws, at most S + 1 of them do work) claim steps in order and draw them at once, each
with its own slot of sampler weights: while one rollout's episodes wait on tools and rewards, the next one samples.
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
    """draw(step, version, slot) -> a rollout, run in `draws` worker threads; load(version, weights, slot) before a
    worker draws with a version its slot does not hold yet. stop_after: the first step not to draw (the run's last
    RL step + 1), or None."""

    def __init__(self, draw: Callable[[int, int, int], Any], load: Callable[[int, Any, int], None],
                 max_staleness: int, start: int, weights: Any, stop_after: int | None = None, draws: int = 1):
        self.draw_fn, self.load_fn, self.max_staleness = draw, load, max_staleness
        self.start, self.stop_after, self.next_step = start, stop_after, start
        # version -> the trained weights of that version (weights None: the start's are published later)
        self.published: dict[int, Any] = {} if weights is None else {start: weights}
        self.claimed: dict[int, int] = {}  # step -> version, claimed by a worker that has not read its weights yet
        self.ready: dict[int, Any] = {}  # step -> drawn rollout
        workers = max(1, min(draws, max_staleness + 1))  # more could never draw: their versions are not out yet
        self.slot_versions: list[int | None] = [None] * workers  # the version each worker's sampler slot holds
        self.error: BaseException | None = None
        self.stopping = False
        self.changed = threading.Condition()
        self.active = self.pauses = 0  # draws in progress ; paused() blocks held
        self.idle_s, self.idle_since = 0.0, time.perf_counter()  # producer idle: no draw in progress
        self.trainer_wait_s = 0.0  # since the last pop_stats()
        self.stats_since = time.perf_counter()
        self.threads = [threading.Thread(target=self.run, args=(slot,), name=f"lit-rlhf-rollout-producer-{slot}",
                                         daemon=True) for slot in range(workers)]

    @property
    def loaded(self) -> int | None:
        """The newest version any worker samples with."""
        held = [v for v in self.slot_versions if v is not None]
        return max(held) if held else None

    def version_for(self, step: int) -> int:
        return max(self.start, step - self.max_staleness)

    def begin(self) -> RolloutProducer:
        for thread in self.threads:
            thread.start()
        return self

    # ---- worker threads ---------------------------------------------------------------------
    def run(self, slot: int) -> None:
        try:
            while (step := self.claim()) is not None:
                version = self.version_for(step)
                weights = self.wait_for_version(step, version)
                if weights is None or not self.begin_draw():
                    return  # stopped
                try:
                    if self.slot_versions[slot] != version:
                        self.load_fn(version, weights, slot)
                        self.slot_versions[slot] = version
                    drawn = self.draw_fn(step, version, slot)
                finally:
                    self.end_draw()
                with self.changed:
                    self.ready[step] = drawn
                    self.changed.notify_all()
        except BaseException as err:  # handed to the trainer, which raises it at its next take()
            with self.changed:
                self.error = self.error or err
                self.stopping = True  # the other workers stop too
                self.changed.notify_all()

    def claim(self) -> int | None:
        """The next step to draw, in order, or None once the run's steps are all claimed (or stop() was called)."""
        with self.changed:
            step = self.next_step
            if self.stopping or (self.stop_after is not None and step >= self.stop_after):
                return None
            self.next_step += 1
            self.claimed[step] = self.version_for(step)
            return step

    def wait_for_version(self, step: int, version: int) -> Any:
        with self.changed:
            while version not in self.published and not self.stopping:
                self.changed.wait()
            del self.claimed[step]
            if self.stopping:
                return None
            weights = self.published[version]
            needed = min([*self.claimed.values(), self.version_for(self.next_step)])
            for old in [v for v in self.published if v < needed]:
                del self.published[old]  # no worker draws with an older version any more
            return weights

    def begin_draw(self) -> bool:
        """Waits while paused; False when stopped meanwhile."""
        with self.changed:
            while self.pauses and not self.stopping:
                self.changed.wait()
            if self.stopping:
                return False
            if self.active == 0:
                self.idle_s += time.perf_counter() - self.idle_since
            self.active += 1
            return True

    def end_draw(self) -> None:
        with self.changed:
            self.active -= 1
            if self.active == 0:
                self.idle_since = time.perf_counter()
            self.changed.notify_all()

    # ---- trainer thread ---------------------------------------------------------------------
    def take(self, step: int) -> Any:
        """Rollout `step`, waiting for it; the producer's error (e.g. a reward's one-line error) is raised here."""
        start = time.perf_counter()
        with self.changed:
            if self.stop_after is not None and step >= self.stop_after:  # past the run's last step: never drawn
                raise ProducerStopped(f"rollout {step} is past the run's {self.stop_after} RL steps, which the "
                                      f"rollout producer does not draw")
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
        with self.changed:
            self.pauses += 1
            while self.active:
                self.changed.wait()
        try:
            yield
        finally:
            with self.changed:
                self.pauses -= 1
                self.changed.notify_all()

    def pop_stats(self) -> dict[str, float]:
        """async/producer_idle_frac, async/trainer_idle_frac: the share of the time since the last call that no draw
        ran (the producer waited for a version to draw with, or was paused) and that the trainer waited for a
        rollout."""
        now = time.perf_counter()
        with self.changed:
            elapsed = max(now - self.stats_since, 1e-9)
            idle = self.idle_s + (now - self.idle_since if self.active == 0 else 0.0)
            stats = {"async/producer_idle_frac": min(idle / elapsed, 1.0),
                     "async/trainer_idle_frac": min(self.trainer_wait_s / elapsed, 1.0),
                     "async/rollouts_ready": float(len(self.ready))}
            self.idle_s = self.trainer_wait_s = 0.0
            self.stats_since = self.idle_since = now
        return stats

    def alive(self) -> bool:
        return any(thread.is_alive() for thread in self.threads)

    def stop(self, wait_s: float | None = None) -> bool:
        """Stops the workers after the draws in progress; True when they ended within wait_s (None:
        STOP_TIMEOUT_S)."""
        with self.changed:
            self.stopping = True
            self.changed.notify_all()
        deadline = time.monotonic() + (STOP_TIMEOUT_S if wait_s is None else wait_s)
        for thread in self.threads:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        return not self.alive()
