"""rlvr.training.rollout.Pipeline: synchronous, or one step ahead on the sampler's own weights; syncs never
overlap a generation; no rollout older than allowed; resume positions per rollout."""

from __future__ import annotations

import threading
import time

import pytest

from rlvr.training.rollout import Pipeline, Rollout


class FakeWorld:
    """A sampler whose weights carry a version number, and a producer drawing from it."""

    def __init__(self, gen_seconds: float = 0.02):
        self.weights = 0  # the version the sampler holds
        self.trainer = 0  # the version the trainer holds
        self.generating = threading.Event()
        self.events: list[tuple] = []
        self.gen_seconds = gen_seconds

    def produce(self, step: int, version: int) -> Rollout:
        assert not self.generating.is_set()
        self.generating.set()
        seen = self.weights
        time.sleep(self.gen_seconds)
        self.events.append(("generated", step, seen))
        self.generating.clear()
        return Rollout(group_size=2, prompt_ids=[[1]], completions=[], rewards=[], reward_values={},
                       policy_version=version, stream_position=step + 1)

    def sync(self) -> float:
        assert not self.generating.is_set(), "a sync overlapped a generation"
        self.weights = self.trainer
        self.events.append(("sync", self.trainer))
        return 0.001


def run(world: FakeWorld, staleness: int, steps: int, train_seconds: float = 0.03, start: int = 0):
    world.weights = world.trainer = start
    pipe = Pipeline(world, world.sync, max_staleness=staleness, total_steps=steps, version=start)
    trained = []
    for step in range(start, steps):
        rollout = pipe.take(step)
        trained.append((step, rollout.policy_version, dict(pipe.times)))
        time.sleep(train_seconds)  # the update
        world.trainer = step + 1
        pipe.publish(step + 1)
    pipe.close()
    return trained, pipe


def test_synchronous_samples_with_the_newest_weights():
    world = FakeWorld()
    trained, _ = run(world, 0, 4)
    assert [(s, v) for s, v, _ in trained] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert [e for e in world.events if e[0] == "generated"] == [("generated", s, s) for s in range(4)]


def test_one_step_ahead_is_one_step_old_and_overlaps():
    world = FakeWorld(gen_seconds=0.05)
    trained, _ = run(world, 1, 6, train_seconds=0.05)
    assert [(s, v) for s, v, _ in trained] == [(0, 0), (1, 0), (2, 1), (3, 2), (4, 3), (5, 4)]
    # rollout s+1 was being generated while step s trained: the trainer barely waited for it
    assert all(t["wait_samples"] < 0.045 for _, _, t in trained[1:])
    # a sync to version v happens after the rollout drawn with v-1 is finished, before the next starts
    order = [e for e in world.events]
    for i, e in enumerate(order):
        if e[0] == "sync":
            assert order[i - 1][0] == "generated"


@pytest.mark.parametrize("staleness", [1, 3])
def test_never_older_than_allowed_when_training_is_slow(staleness):
    world = FakeWorld(gen_seconds=0.005)
    trained, _ = run(world, staleness, 5, train_seconds=0.03)
    assert all(0 <= s - v <= staleness for s, v, _ in trained)
    times = trained[-2][2]  # (the last step starts no further rollout)
    assert times["wait_weights"] > 0.01  # the fast sampler waited for the slow trainer's weights


def test_quiesce_gives_an_idle_sampler_the_newest_weights():
    world = FakeWorld(gen_seconds=0.05)
    pipe = Pipeline(world, world.sync, max_staleness=1, total_steps=5, version=0)
    pipe.take(0)  # starts drawing step 1 in the background
    world.trainer = 1
    pipe.publish(1)
    assert pipe.quiesce() > 0 and world.weights == 1 and not world.generating.is_set()
    assert pipe.take(1).policy_version == 0  # the rollout drawn ahead is kept
    pipe.close()


def test_resume_starts_from_the_checkpointed_version():
    world = FakeWorld()
    trained, _ = run(world, 1, 5, start=3)
    assert [(s, v) for s, v, _ in trained] == [(3, 3), (4, 3)]


def test_errors_in_the_background_reach_the_trainer():
    class Broken(FakeWorld):
        def produce(self, step, version):
            raise RuntimeError("sampler died")

    world = Broken()
    pipe = Pipeline(world, world.sync, max_staleness=1, total_steps=3, version=0)
    with pytest.raises(RuntimeError, match="sampler died"):
        pipe.take(0)
    pipe.close()
