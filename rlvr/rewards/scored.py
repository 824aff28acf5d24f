"""Sample and score: the one path from prompts to scored completions, for training and evaluation.

``sample_and_score`` draws ``n`` completions for each prompt from a sampler (or ``n`` episodes from
an ``rlvr.sampling.episodes.EpisodeRunner``), scores them all with the rewards in one batch, and
leaves unscored the episodes whose environment failed. The caller consumes the result group by
group (``Scored.groups``): training keeps or samples again each group
(``rlvr.training.rollout.RolloutProducer``), evaluation counts what passed
(``rlvr.evaluation.evaluate.evaluate_with``). Changing how samples are drawn and scored is this file.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from rlvr.rewards.runner import BoundReward, RewardBatch, score_batch
from rlvr.sampling.episodes import episode_sums, unscore_failed
from rlvr.sampling.prompts import Prompt, with_prefix

if TYPE_CHECKING:
    from rlvr.sampling.samplers import Completion


@dataclass
class Group:
    """One prompt's ``n`` completions and their scores."""

    completions: list[Completion]
    total: list[float | None]  # the weighted total of each (None: unscorable)
    values: dict[str, list[float | None]]  # per reward
    infos: dict[str, list[dict]]  # per reward: what it said (why, pred, ...)


@dataclass
class Scored:
    """``n`` completions for each prompt of a batch, scored; completion ``j`` of prompt ``i`` is
    at ``i * n + j`` of every list."""

    n: int
    completions: list[Completion]
    rows: list[dict]  # what the rewards saw, one per completion (an episode's has its env_state)
    scores: RewardBatch
    episodes: dict[str, float] | None  # the episodes' sums (rlvr.sampling.episodes.episode_sums), else None
    time_generate: float = 0.0
    time_score: float = 0.0

    def groups(self) -> Iterator[Group]:
        """Each prompt's group, in the order of the prompts."""
        s, n = self.scores, self.n
        for start in range(0, len(self.completions), n):
            part = slice(start, start + n)
            yield Group(self.completions[part], s.total[part], {name: s.values[name][part] for name in s.names},
                        {name: s.infos[name][part] for name in s.names})


def sample_and_score(sampler, rewards: Sequence[BoundReward], prompts: Sequence[Prompt], rows: Sequence[dict], *,
                     n: int, episodes=None, unscore: Sequence[str] = (), **options: Any) -> Scored:
    """Sample ``n`` completions of each of ``prompts`` (``rows``: their task rows) and score them.

    ``options`` go to ``sampler.generate`` (``temperature``, ``top_p``, ``max_tokens``, ``seed``, and
    ``logprobs`` or ``progress`` when the caller wants them). With ``episodes`` each sample is an
    episode; one whose environment failed is left unscored: its total becomes None, and so does its
    value under each reward of ``unscore``. Without prompts nothing is sampled or scored."""
    if not prompts:
        empty = RewardBatch([r.name for r in rewards], {r.name: [] for r in rewards}, {r.name: [] for r in rewards},
                            [], Counter())
        return Scored(n, [], [], empty, episode_sums([]) if episodes is not None else None)
    start = time.perf_counter()
    prompt_ids = [p.ids for p in prompts]
    if episodes is None:
        outs = with_prefix(sampler.generate(prompt_ids, n=n, **options), prompts)
        flat_rows, sums = [row for row in rows for _ in range(n)], None
    else:
        outs, flat_rows, sums = episodes.sample(sampler, rows, prompt_ids, n=n, **options)
    sampled = time.perf_counter()
    flat = [c for group in outs for c in group]
    scores = score_batch(rewards, [p for p in prompts for _ in range(n)],  # TRL's rewards get the messages
                         [scored_text(c) for c in flat], [c.token_ids for c in flat], flat_rows)
    if sums is not None:
        unscore_failed(scores, flat_rows, unscore)
    return Scored(n, flat, flat_rows, scores, sums, time_generate=sampled - start,
                  time_score=time.perf_counter() - sampled)


def scored_text(completion) -> str:
    """What the rewards read of a completion: an episode's ``reward_text`` when the recipe's
    ``environment.score`` chose one, else its text (a sampler's own completions may lack the field)."""
    chosen = getattr(completion, "reward_text", None)
    return completion.text if chosen is None else chosen
