"""RolloutProducer without models: the version schedule, the bound on what is drawn ahead, no rollout dropped or
repeated, errors handed to the trainer, and a thread that stops."""

import random
import threading
import time

import pytest

from lit_rlhf.rollout.producer import ProducerStopped, RolloutProducer


class Recorder:
    """draw/load stand-ins that sleep a random while and record what the producer did, and when."""

    def __init__(self, seed=0):
        self.rng, self.lock = random.Random(seed), threading.Lock()
        self.loaded, self.drawn, self.events = [], [], []

    def pause(self):
        time.sleep(self.rng.uniform(0, 0.004))

    def load(self, version, weights, slot=0):
        assert weights == f"weights {version}"
        self.loaded.append(version)

    def draw(self, step, version, slot=0):
        self.pause()
        with self.lock:
            self.drawn.append((step, version))
            self.events.append(("drawn", step))
        return (step, version)


@pytest.mark.parametrize("staleness", [0, 1, 2, 3])
@pytest.mark.parametrize("start", [0, 5])
def test_rollout_t_is_drawn_once_with_version_t_minus_s_and_never_more_than_s_plus_1_ahead(staleness, start):
    recorder, steps = Recorder(seed=staleness), 12
    producer = RolloutProducer(recorder.draw, recorder.load, staleness, start=start, weights=f"weights {start}",
                               stop_after=start + steps).begin()
    trained = []
    for step in range(start, start + steps):
        drawn_step, version = producer.take(step)
        with recorder.lock:
            ahead = sum(1 for kind, s in recorder.events if kind == "drawn" and s > step)
            recorder.events.append(("trained", step))
        trained.append((drawn_step, version))
        assert ahead <= staleness  # rollouts beyond this one already drawn: their versions are not out yet
        recorder.pause()  # the update
        producer.publish(step + 1, f"weights {step + 1}")
    assert producer.stop()
    expected = [(step, max(start, step - staleness)) for step in range(start, start + steps)]
    assert trained == expected and recorder.drawn == expected  # each step once, in order, with its version
    assert all(0 <= step - version <= staleness for step, version in trained)
    assert recorder.loaded == sorted(set(v for _, v in expected))  # each version loaded once


def test_staleness_0_alternates_draw_and_update_strictly():
    recorder = Recorder()
    producer = RolloutProducer(recorder.draw, recorder.load, 0, start=0, weights="weights 0", stop_after=5).begin()
    for step in range(5):
        producer.take(step)
        with recorder.lock:
            recorder.events.append(("trained", step))
        time.sleep(0.01)  # the producer has time to run ahead, if it could
        producer.publish(step + 1, f"weights {step + 1}")
    producer.stop()
    assert recorder.events == [(kind, step) for step in range(5) for kind in ("drawn", "trained")]


def test_the_producers_error_is_raised_in_the_trainer_and_stop_ends_the_thread():
    def draw(step, version, slot):
        if step == 2:
            raise ValueError("reward server said no")
        return step

    producer = RolloutProducer(draw, lambda v, w, slot: None, 2, start=0, weights="w").begin()
    assert producer.take(0) == 0 and producer.take(1) == 1
    with pytest.raises(ValueError, match="reward server said no"):
        producer.take(2)
    assert producer.stop() and not producer.alive()


def test_a_producer_waiting_for_a_version_stops_and_a_trainer_waiting_for_it_is_told():
    producer = RolloutProducer(lambda s, v, slot: s, lambda v, w, slot: None, 0, start=0, weights="w").begin()
    assert producer.take(0) == 0  # rollout 1 needs version 1, which is never published
    stopper = threading.Timer(0.05, producer.stop)
    stopper.start()
    with pytest.raises(ProducerStopped):
        producer.take(1)
    stopper.join()
    assert not producer.alive()


def test_a_trainer_asking_for_a_rollout_past_the_runs_end_is_told_at_once():
    producer = RolloutProducer(lambda s, v, slot: s, lambda v, w, slot: None, 1, start=2, weights="w",
                               stop_after=2).begin()  # resumed at the end: nothing to draw
    with pytest.raises(ProducerStopped, match="past the run's 2 RL steps"):
        producer.take(2)
    assert producer.stop(wait_s=5) and not producer.alive()


def test_paused_holds_the_producer_between_draws():
    started = threading.Event()
    drawing = []

    def draw(step, version, slot):
        started.set()
        drawing.append(step)
        return step

    producer = RolloutProducer(draw, lambda v, w, slot: None, 3, start=0, weights="w", stop_after=4)
    with producer.paused():
        producer.begin()
        assert not started.wait(0.1) and drawing == []  # nothing drawn while paused
    assert [producer.take(step) for step in range(4)] == [0, 1, 2, 3]
    producer.stop()


@pytest.mark.parametrize("staleness,draws", [(1, 2), (2, 3), (2, 2), (3, 8)])
def test_concurrent_draws_keep_the_schedule_and_overlap(staleness, draws):
    """Workers claim steps in order: each rollout still drawn once with version t - S, each worker's slot loaded
    with the versions it draws with, and draws whose versions are out run at the same time."""
    lock, steps = threading.Lock(), 12
    active, overlap, drawn, slot_loads = [0], [0], [], {}

    def load(version, weights, slot):
        assert weights == f"weights {version}"
        slot_loads.setdefault(slot, []).append(version)

    def draw(step, version, slot):
        assert slot_loads[slot][-1] == version  # the worker's slot holds the version it draws with
        with lock:
            active[0] += 1
            overlap[0] = max(overlap[0], active[0])
        time.sleep(0.02)  # a tool's wait
        with lock:
            active[0] -= 1
            drawn.append((step, version))
        return step, version

    producer = RolloutProducer(draw, load, staleness, start=0, weights="weights 0", stop_after=steps, draws=draws)
    workers = min(draws, staleness + 1)
    assert len(producer.threads) == workers
    producer.begin()
    for step in range(steps):
        assert producer.take(step) == (step, max(0, step - staleness))
        producer.publish(step + 1, f"weights {step + 1}")
    assert producer.stop()
    assert sorted(drawn) == [(step, max(0, step - staleness)) for step in range(steps)]
    assert overlap[0] == workers  # the trainer here is instant: every worker draws at once
    for versions in slot_loads.values():
        assert versions == sorted(set(versions))  # a slot loads each version once, in order


def test_paused_waits_for_every_draw_in_progress():
    release, inside = threading.Event(), threading.Event()

    def draw(step, version, slot):
        inside.set()
        release.wait(5)
        return step

    producer = RolloutProducer(draw, lambda v, w, slot: None, 1, start=0, weights="w", stop_after=2, draws=2).begin()
    assert inside.wait(5)
    paused = threading.Event()

    def pause():
        with producer.paused():
            paused.set()

    pauser = threading.Thread(target=pause)
    pauser.start()
    assert not paused.wait(0.1)  # two draws in progress
    release.set()
    pauser.join(5)
    assert paused.is_set()
    assert [producer.take(0), producer.take(1)] == [0, 1]
    producer.stop()


def test_an_error_in_one_worker_stops_the_others():
    def draw(step, version, slot):
        if step == 1:
            raise ValueError("tool crashed")
        time.sleep(0.01)
        return step

    producer = RolloutProducer(draw, lambda v, w, slot: None, 2, start=0, weights="w", draws=3).begin()
    with pytest.raises(ValueError, match="tool crashed"):
        for step in range(10):
            producer.take(step)
            producer.publish(step + 1, "w")
    assert producer.stop() and not producer.alive()
