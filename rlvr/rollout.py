"""Rollouts: prompt rows in, scored completions out.

``RolloutProducer.produce(step)`` takes this rank's prompts from its shard of the prompt
stream, samples K completions for each, scores them with the recipe's rewards and returns a
``Rollout`` ready for the update. With dynamic sampling (DAPO) groups whose rewards are all
equal are sampled again, from fresh prompts of the same shard, up to ``max_rounds``.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Sequence

from .prompts import PromptSet
from .rewards import BoundReward, score_batch
from .samplers import Completion, Sampler


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

    @property
    def reward_names(self) -> list[str]:
        return list(self.reward_values)

    @property
    def seq_prompts(self) -> list[list[int]]:
        return [self.prompt_ids[i // self.group_size] for i in range(len(self.completions))]

    @property
    def lengths(self) -> list[int]:
        return [len(c.token_ids) for c in self.completions]

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
                 *, groups: int, sampling, dynamic_sampling, seed: int, rank: int = 0, logprobs: bool = False):
        """``logprobs``: ask the sampler for each sampled token's log-prob (importance sampling)."""
        self.sampler, self.rewards, self.prompts, self.stream = sampler, list(rewards), prompts, stream
        self.groups, self.sampling, self.dynamic, self.seed, self.rank = groups, sampling, dynamic_sampling, seed, rank
        self.logprobs = logprobs

    def produce(self, step: int) -> Rollout:
        k = self.sampling.num_generations
        kept: list[tuple[int, list[Completion], list[float | None], dict[str, list]]] = []
        errors = rounds = 0
        t_gen = t_score = 0.0
        wanted = self.stream.take(self.groups)
        while wanted:
            rounds += 1
            last_round = not self.dynamic.enabled or rounds >= self.dynamic.max_rounds
            t0 = time.perf_counter()
            outs = self.sampler.generate(
                [self.prompts.prompts[i].ids for i in wanted], n=k, temperature=self.sampling.temperature,
                top_p=self.sampling.top_p, max_tokens=self.sampling.max_tokens,
                seed=self.seed * 1_000_003 + step * 1_009 + rounds * 101 + self.rank, logprobs=self.logprobs)
            t1 = time.perf_counter()
            flat = [c for group in outs for c in group]
            scored = score_batch(
                self.rewards, [self.prompts.prompts[i].text for i in wanted for _ in range(k)],
                [c.text for c in flat], [c.token_ids for c in flat],
                [self.prompts.rows[i] for i in wanted for _ in range(k)])
            t_gen, t_score = t_gen + t1 - t0, t_score + time.perf_counter() - t1
            errors += sum(scored.errors.values())
            for g, index in enumerate(wanted):
                part = slice(g * k, (g + 1) * k)
                if not last_round and zero_variance(scored.total[part]):
                    continue
                kept.append((index, flat[part], scored.total[part], {n: scored.values[n][part] for n in scored.names}))
            wanted = [] if last_round else self.stream.take(self.groups - len(kept))
        names = [r.name for r in self.rewards]
        return Rollout(
            group_size=k,
            prompt_ids=[self.prompts.prompts[index].ids for index, *_ in kept],
            completions=[c for _, cs, _, _ in kept for c in cs],
            rewards=[r for _, _, rs, _ in kept for r in rs],
            reward_values={n: [v for *_, vals in kept for v in vals[n]] for n in names},
            reward_errors=errors, rounds=rounds, time_generate=t_gen, time_score=t_score,
        )
