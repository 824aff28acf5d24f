"""Rollouts: prompt rows in, scored completions out.

``RolloutProducer.produce(step, version)`` takes this rank's prompts from its shard of the prompt
stream, samples K completions for each and scores them with the recipe's rewards
(``rlvr.rewards.scored.sample_and_score``, the path evaluation takes too), and returns a
``Rollout`` ready for the update, stamped with the policy version that sampled it. With dynamic sampling (DAPO) groups whose rewards are all
equal are sampled again, from fresh prompts of the same shard, up to ``max_rounds``. The stream
may be a ``rlvr.training.pool.PromptPool`` (``data.pool``): it is told every group's rewards, the
groups sampled again included, and skips the prompts it retired.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Sequence

from rlvr.models.distributed import add_sums
from rlvr.rewards.runner import BoundReward, Unscored
from rlvr.rewards.scored import Group, sample_and_score
from rlvr.sampling.prompts import PromptSet
from rlvr.sampling.samplers import Completion, Sampler


class PromptStream:
    """Row indices in an epoch-wise shuffled order, shared out between ranks.

    Position ``g`` of the global order belongs to rank ``g % world``: the ranks of one step read
    disjoint prompts, and a rank that needs more (dynamic sampling) reads further along its own
    shard, so no rank's refill depends on another's. ``position`` counts what this rank has
    taken; it is checkpointed per rank for an exact resume.
    """

    def __init__(self, size: int, seed: int, rank: int = 0, world: int = 1, position: int = 0):
        self.size, self.seed, self.rank, self.world, self.position = size, seed, rank, world, position
        self._epoch, self._order = -1, []

    def take(self, count: int) -> list[int]:
        out = []
        for _ in range(count):
            epoch, offset = divmod(self.position * self.world + self.rank, self.size)
            if epoch != self._epoch:
                self._epoch, self._order = epoch, list(range(self.size))
                random.Random(self.seed * 1_000_003 + epoch).shuffle(self._order)
            out.append(self._order[offset])
            self.position += 1
        return out


@dataclass
class Rollout:
    """Scored groups of K completions; sequence ``i`` belongs to group ``i // group_size``."""

    group_size: int
    prompt_ids: list[list[int]]  # one per group
    completions: list[Completion]
    rewards: list[float | None]  # weighted total per completion; None: unscorable
    reward_values: dict[str, list[float | None]]  # per reward, per completion
    reward_errors: int = 0  # samples a raising reward could not score
    rounds: int = 1
    time_generate: float = 0.0
    time_score: float = 0.0
    policy_version: int = 0  # optimizer steps the sampler's weights had taken when it sampled these
    stream_position: int = 0  # this rank's prompt-stream position after taking these prompts
    episodes: dict[str, float] | None = None  # sums over the episodes (rlvr.sampling.episodes.episode_sums)
    time_env: float = 0.0  # wall seconds waiting for the environments (part of time_generate)
    pool: dict[str, float] | None = None  # the prompt pool's figures (rlvr.training.pool), when there is one
    pool_state: dict | None = None  # the pool's state after taking these prompts, for the checkpoint
    reward_infos: dict[str, list] | None = None  # per reward, per completion: what it said (why, pred, ...)
    unscored: Unscored = field(default_factory=Unscored)  # what the rewards could not score, all rounds
    # The rewards' own figures (Score.metrics) as named sums (rlvr.rewards.runner.metric_sums), all
    # rounds: a group sampled again cost its scoring too.
    reward_metrics: dict[str, float] = field(default_factory=dict)

    @property
    def reward_names(self) -> list[str]:
        return list(self.reward_values)

    @property
    def seq_prompts(self) -> list[list[int]]:
        return [self.prompt_ids[i // self.group_size] for i in range(len(self.completions))]

    @property
    def lengths(self) -> list[int]:
        """Tokens after each prompt (an episode's: the policy's and the environment's)."""
        return [len(c.token_ids) for c in self.completions]

    @property
    def policy_lengths(self) -> list[int]:
        """Tokens the policy sampled, per sequence: what the loss and length penalties count."""
        return [c.policy_tokens for c in self.completions]

    @property
    def truncated(self) -> list[bool]:
        return [c.truncated for c in self.completions]


def zero_variance(values: Sequence[float | None]) -> bool:
    """A group whose (two or more) scorable rewards are all equal: no learning signal."""
    scored = [v for v in values if v is not None]
    return len(scored) >= 2 and max(scored) == min(scored)


class RolloutProducer:
    """Samples and scores this rank's share of every step's prompts."""

    def __init__(self, sampler: Sampler, rewards: Sequence[BoundReward], prompts: PromptSet, stream: PromptStream,
                 *, groups: int, sampling, dynamic_sampling, seed: int, rank: int = 0, logprobs: bool = False,
                 episodes=None):
        """``logprobs``: ask the sampler for each sampled token's log-prob (importance sampling);
        ``episodes``: an ``rlvr.sampling.episodes.EpisodeRunner`` when each sample is an episode."""
        self.sampler, self.rewards, self.prompts, self.stream = sampler, list(rewards), prompts, stream
        self.groups, self.sampling, self.dynamic, self.seed, self.rank = groups, sampling, dynamic_sampling, seed, rank
        self.logprobs, self.episodes = logprobs, episodes

    def produce(self, step: int, version: int = 0) -> Rollout:
        """This rank's rollout of ``step``, sampled with weights ``version`` optimizer steps old."""
        k = self.sampling.num_generations
        kept: list[tuple[int, Group]] = []
        errors = rounds = 0
        unscored = Unscored()
        t_gen = t_score = 0.0
        episodes: dict[str, float] | None = None
        reward_metrics: dict[str, float] = {}
        wanted = self.stream.take(self.groups)
        record = getattr(self.stream, "record", None)  # a PromptPool learns from every group sampled
        while wanted:
            rounds += 1
            last_round = not self.dynamic.enabled or rounds >= self.dynamic.max_rounds
            batch = sample_and_score(
                self.sampler, self.rewards, [self.prompts.prompts[i] for i in wanted],
                [self.prompts.rows[i] for i in wanted], n=k, episodes=self.episodes,
                temperature=self.sampling.temperature, top_p=self.sampling.top_p,
                max_tokens=self.sampling.max_tokens, seed=self.seed * 1_000_003 + step * 1_009 + rounds * 101 + self.rank,
                logprobs=self.logprobs)
            t_gen, t_score = t_gen + batch.time_generate, t_score + batch.time_score
            errors += sum(batch.scores.errors.values())
            if batch.episodes is not None:
                episodes = add_sums(episodes, batch.episodes)
            unscored.add(batch.scores.unscored())
            reward_metrics = add_sums(reward_metrics, batch.scores.metrics)
            for index, group in zip(wanted, batch.groups()):
                if record is not None:
                    record(index, group.total)
                if not last_round and zero_variance(group.total):
                    continue
                kept.append((index, group))
            wanted = [] if last_round else self.stream.take(self.groups - len(kept))
        names = [r.name for r in self.rewards]
        groups = [group for _, group in kept]
        return Rollout(
            group_size=k,
            prompt_ids=[self.prompts.prompts[index].ids for index, _ in kept],
            completions=[c for g in groups for c in g.completions],
            rewards=[r for g in groups for r in g.total],
            reward_values={n: [v for g in groups for v in g.values[n]] for n in names},
            reward_infos={n: [x for g in groups for x in g.infos[n]] for n in names},
            reward_errors=errors, unscored=unscored, reward_metrics=reward_metrics, rounds=rounds,
            time_generate=t_gen, time_score=t_score,
            policy_version=version, stream_position=self.stream.position, episodes=episodes,
            time_env=episodes.pop("time_env", 0.0) if episodes else 0.0,
            pool=self.stream.figures() if record else None, pool_state=self.stream.state() if record else None,
        )


class Pipeline:
    """Rollouts for the trainer, synchronous or drawn one step ahead on the sampler's own weights.

    ``max_staleness`` 0: ``take(step)`` samples and scores, the trainer trains, ``publish``
    syncs the new weights at once: the synchronous loop. ``max_staleness`` >= 1 (one step off
    the policy): while the trainer trains on step s, a background thread samples and scores step
    s + 1 with the weights the trainer had at the start of step s. ``publish`` only records the
    trainer's new version; ``take(s + 1)`` waits for the rollout drawn ahead, syncs the new
    weights into the now idle sampler and starts drawing step s + 2. So every rollout is exactly
    one optimizer step old, within any ``max_staleness`` >= 1 (one batch in flight: with one
    sampler, drawing further ahead adds no throughput). Every sync runs on the trainer's thread
    (collectives under ZeRO-3 stay in order across ranks); the thread only generates and scores.

    Times per step: ``wait_samples`` (the trainer blocked on the rollout), ``wait_weights``
    (the sampler idle between finishing one rollout and starting the next), ``sync``.
    """

    def __init__(self, producer: RolloutProducer, sync, *, max_staleness: int, total_steps: int, version: int):
        """``sync()`` pushes the trainer's weights into the sampler and returns the seconds it took;
        ``version``: optimizer steps the sampler's weights have taken (the start step)."""
        from concurrent.futures import ThreadPoolExecutor

        self.producer, self.sync, self.max_staleness, self.total = producer, sync, max_staleness, total_steps
        self.sampler_version = self.trainer_version = version
        self.pending = None  # (step, future) of the rollout being drawn ahead
        self.finished_at = None  # when the sampler last went idle
        self.times: dict[str, float] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlvr-rollout") if max_staleness else None

    def take(self, step: int) -> Rollout:
        """The rollout the trainer trains on at ``step``."""
        self.times = {"wait_samples": 0.0, "wait_weights": 0.0, "sync": 0.0}
        if self._pool is None:
            rollout = self.producer.produce(step, self.sampler_version)
            self.times["wait_samples"] = rollout.time_generate + rollout.time_score
            return rollout
        if self.pending is None or self.pending[0] != step:
            self._start(step)
        start = time.perf_counter()
        rollout = self.pending[1].result()
        self.times["wait_samples"] = time.perf_counter() - start
        self.pending = None
        self._sync_if_behind()
        if step + 1 < self.total:
            self._start(step + 1)
        if step - rollout.policy_version > self.max_staleness:  # cannot happen with one batch in flight
            raise RuntimeError(f"rollout of step {step} was drawn at policy version {rollout.policy_version}, "
                               f"more than sampling.max_staleness={self.max_staleness} steps old")
        return rollout

    def publish(self, version: int) -> float:
        """The trainer's weights reached ``version``; synchronous mode syncs now (seconds taken)."""
        self.trainer_version = version
        if self._pool is None:
            return self._sync_if_behind()
        return 0.0

    def quiesce(self) -> float:
        """Wait for the sampler to be idle and give it the newest weights (before an evaluation
        uses it, and at the end); the rollout drawn ahead, if any, is kept."""
        if self.pending is not None:
            self.pending[1].exception()  # wait; its errors surface in take()
        return self._sync_if_behind()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _sync_if_behind(self) -> float:
        if self.sampler_version == self.trainer_version:
            return 0.0
        seconds = self.sync()
        self.sampler_version = self.trainer_version
        self.times["sync"] = self.times.get("sync", 0.0) + seconds
        return seconds

    def _start(self, step: int) -> None:
        if self.finished_at is not None:
            self.times["wait_weights"] = time.perf_counter() - self.finished_at
        version = self.sampler_version

        def draw() -> Rollout:
            try:
                return self.producer.produce(step, version)
            finally:
                self.finished_at = time.perf_counter()

        self.pending = (step, self._pool.submit(draw))
