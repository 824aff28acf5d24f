"""The learnable-prompt pool (``data.pool``): a prompt stream that stops drawing the prompts whose
last groups were all solved or all failed, and draws them again some epochs later.

A group whose scorable rewards are all equal has no leave-one-out advantage: its K samples train
nothing. ``PromptPool.record`` classifies every group sampled (kept or sampled again by dynamic
sampling): zero variance at or above ``pass_threshold`` is *solved*, below it *failed*, anything
else *mixed*. A prompt whose last ``retire_after`` groups were all solved (or all failed) is
retired: ``take`` skips it the next ``revisit_after`` times its rank's stream reaches it (one
epoch each), then re-admits it (drawn the next time); its history is kept, so a revisit that is again all solved
(failed) retires it at once, and a mixed one keeps it. When every prompt of a rank's shard is
retired (or those that are not were all drawn already in the same call), the oldest-retired
are drawn (``pool_readmitted``), so ``take`` always returns.

Prompts are shared out by row: row ``i`` belongs to rank ``i % world`` for the whole run, so each
rank keeps the complete history of its own prompts without talking to the others; each rank
draws its shard in an epoch-wise shuffled order (with one rank, the plain stream's order). The
state is plain JSON (``state()``, ``PromptPool.from_state``), saved in each rank's checkpoint
file for an exact ``--resume``.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from rlvr import RlvrError
from rlvr.training.rollout import PromptStream

log = logging.getLogger("rlvr.training.pool")

POOL_STATE_VERSION = 1
KINDS = ("solved", "failed")
SHARD_SEED_STRIDE = 7919  # rank r shuffles its shard with data.seed + r * this


def shard_rows(size: int, rank: int, world: int) -> list[int]:
    """The rows of ``size`` that belong to ``rank`` of ``world``: ``i % world == rank``."""
    return list(range(rank, size, world))


def outcome(rewards: Sequence[float | None], pass_threshold: float) -> str | None:
    """``"solved"``/``"failed"`` for a group with zero reward variance (its common reward at or
    above / below ``pass_threshold``), ``"mixed"`` otherwise; None with fewer than two scorable
    rewards (no evidence either way)."""
    scored = [r for r in rewards if r is not None]
    if len(scored) < 2:
        return None
    if max(scored) != min(scored):
        return "mixed"
    return "solved" if scored[0] >= pass_threshold else "failed"


class PromptPool:
    """This rank's prompts, minus the retired ones: ``take(count)`` row indices, ``record(index,
    rewards)`` after each group is scored. Deterministic: the same records give the same draws."""

    def __init__(self, size: int, seed: int, rank: int = 0, world: int = 1, *, retire_after: int = 2,
                 revisit_after: int | None = 2, pass_threshold: float = 1.0, position: int = 0):
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not one of {world} ranks")
        if size < world:
            raise RlvrError(f"data.pool: {size} train prompts cannot give each of {world} ranks one")
        if retire_after < 1 or (revisit_after is not None and revisit_after < 1):
            raise ValueError("retire_after and revisit_after must be at least 1")
        self.size, self.seed, self.rank, self.world = size, seed, rank, world
        self.retire_after, self.revisit_after, self.pass_threshold = retire_after, revisit_after, pass_threshold
        self.shard = shard_rows(size, rank, world)
        self._stream = PromptStream(len(self.shard), seed + rank * SHARD_SEED_STRIDE, position=position)
        self.streaks: dict[int, tuple[str, int]] = {}  # row -> (kind, consecutive groups of that kind)
        self.retired: dict[int, int | None] = {}  # row -> epochs left to sit out, >= 1 (None: for ever); oldest first
        self.revisited = self.readmitted = 0  # since the last figures()
        self._warned = False

    @property
    def position(self) -> int:
        """Draws from this rank's stream so far (skipped prompts included)."""
        return self._stream.position

    def take(self, count: int) -> list[int]:
        out: list[int] = []
        drawn: set[int] = set()  # prompts this call drew from the stream (all active)
        lent = False
        for _ in range(count):
            active = len(self.shard) - len(self.retired)
            if active > len(drawn):  # an active prompt this call has not drawn yet: the stream reaches it
                out.append(self._next())
                drawn.add(out[-1])
                continue
            # Every prompt is retired, or the active ones were all drawn in this call: the
            # oldest-retired not drawn yet, without leaving retirement (its group's record decides:
            # the same outcome again retires it anew, as the newest; anything else re-admits it).
            spare = next((i for i in self.retired if i not in out), None)
            if spare is None:  # the call wants more prompts than the shard has
                out.append(self._next() if active else next(iter(self.retired)))
                continue
            out.append(spare)
            self.readmitted, lent = self.readmitted + 1, True
        if lent and not self._warned:
            log.warning(f"data.pool: rank {self.rank} has fewer prompts not retired than it draws at once; drawing "
                        "the oldest-retired as well (pool_readmitted in metrics.jsonl)")
        self._warned = lent
        return out

    def _next(self) -> int:
        """The next active prompt in the stream; retired ones passed by count one epoch sat out,
        and one that has sat out its last is re-admitted (drawn when the stream next reaches it).
        Some prompt is active, so this ends within two epochs of the stream."""
        while True:
            index = self.shard[self._stream.take(1)[0]]
            if index not in self.retired:
                return index
            wait = self.retired[index]
            if wait == 1:
                del self.retired[index]
                self.revisited += 1
            elif wait is not None:
                self.retired[index] = wait - 1  # an existing key keeps its place (retirement order)

    def record(self, index: int, rewards: Sequence[float | None]) -> None:
        """The rewards (weighted totals, None: unscorable) of one group sampled for row ``index``."""
        if index % self.world != self.rank or not 0 <= index < self.size:
            raise ValueError(f"row {index} is not in rank {self.rank}'s shard")
        kind = outcome(rewards, self.pass_threshold)
        if kind is None:
            if index in self.retired:  # lent (all retired) and no evidence: to the back of the line all the same
                self.retired[index] = self.retired.pop(index)
            return
        if kind == "mixed":
            self.streaks.pop(index, None)
            self.retired.pop(index, None)
            return
        last, count = self.streaks.get(index, (kind, 0))
        count = count + 1 if last == kind else 1
        self.streaks[index] = (kind, count)
        self.retired.pop(index, None)  # retired again, it becomes the newest
        if count >= self.retire_after:
            self.retired[index] = self.revisit_after

    def figures(self) -> dict[str, float]:
        """Sums for the step's metrics (``rlvr.runs.metrics``); resets the per-step counts."""
        solved = sum(self.streaks[i][0] == "solved" for i in self.retired)
        out = {"pool_prompts": len(self.shard), "pool_active": len(self.shard) - len(self.retired),
               "pool_retired_solved": solved, "pool_retired_failed": len(self.retired) - solved,
               "pool_revisited": self.revisited, "pool_readmitted": self.readmitted}
        self.revisited = self.readmitted = 0
        return out

    def state(self) -> dict[str, Any]:
        """Everything a resume needs, as JSON data."""
        return {"version": POOL_STATE_VERSION, "size": self.size, "rank": self.rank, "world": self.world,
                "position": self.position,
                "streaks": [[i, kind, n] for i, (kind, n) in sorted(self.streaks.items())],
                "retired": [[i, wait] for i, wait in self.retired.items()]}

    @classmethod
    def from_state(cls, data: Any, size: int, seed: int, rank: int = 0, world: int = 1, **options) -> PromptPool:
        """The pool ``state()`` saved, continuing exactly; ValueError when ``data`` is not one
        (:func:`check_state`) or is another shard's (size, rank or world differ)."""
        check_state(data)
        if (data["size"], data["rank"], data["world"]) != (size, rank, world):
            raise ValueError(f"it is rank {data['rank']} of {data['world']}'s pool over {data['size']} prompts, "
                             f"not rank {rank} of {world}'s over {size}")
        pool = cls(size, seed, rank, world, position=data["position"], **options)
        pool.streaks = {i: (kind, n) for i, kind, n in data["streaks"]}
        pool.retired = {i: wait for i, wait in data["retired"]}
        return pool


def _count(value: Any, least: int = 0) -> bool:
    return type(value) is int and value >= least


def check_state(data: Any) -> None:
    """ValueError unless ``data`` is a pool state as ``PromptPool.state`` writes it."""
    if not isinstance(data, dict) or data.get("version") != POOL_STATE_VERSION:
        raise ValueError(f"pool: not a prompt-pool state of version {POOL_STATE_VERSION}")
    size, rank, world = data.get("size"), data.get("rank"), data.get("world")
    if not (_count(size, 1) and _count(world, 1) and _count(rank) and rank < world and _count(data.get("position"))):
        raise ValueError("pool: size, rank, world and position must be integers with 0 <= rank < world")
    streaks, retired = data.get("streaks"), data.get("retired")
    if not (isinstance(streaks, list) and isinstance(retired, list)):
        raise ValueError("pool: streaks and retired must be lists")
    mine = set()
    for entry in streaks:
        if not (isinstance(entry, list) and len(entry) == 3 and _count(entry[0]) and entry[0] < size
                and entry[0] % world == rank and entry[1] in KINDS and _count(entry[2], 1)):
            raise ValueError(f"pool: bad streak {str(entry)[:60]} (want [row of this shard, kind, count >= 1])")
        if entry[0] in mine:
            raise ValueError(f"pool: row {entry[0]} has two streaks")
        mine.add(entry[0])
    seen = set()
    for entry in retired:
        if not (isinstance(entry, list) and len(entry) == 2 and entry[0] in mine and entry[0] not in seen
                and (entry[1] is None or _count(entry[1], 1))):
            raise ValueError(f"pool: bad retired entry {str(entry)[:60]} (want [row with a streak, epochs >= 1 "
                             "or null], each row once)")
        seen.add(entry[0])


def prompt_source(recipe, size: int, rank: int, world: int, position: int, saved: dict | None = None):
    """What the rollouts draw from: a ``PromptPool`` under ``data.pool.enabled`` (the checkpoint's
    pool state, ``saved``, when resuming), else the plain ``PromptStream``."""
    cfg, seed = recipe.data.pool, recipe.data.seed
    if not cfg.enabled:
        if saved is not None:
            log.warning("the checkpoint holds a prompt-pool state but data.pool is off: drawing from the plain stream")
        return PromptStream(size, seed, rank, world, position)
    threshold = recipe.eval.pass_threshold if cfg.pass_threshold is None else cfg.pass_threshold
    options = dict(retire_after=cfg.retire_after, revisit_after=cfg.revisit_after, pass_threshold=threshold)
    if saved is None:
        if position:
            log.warning("data.pool: the checkpoint was saved with data.pool off; the pool starts afresh")
        return PromptPool(size, seed, rank, world, **options)
    try:
        return PromptPool.from_state(saved, size, seed, rank, world, **options)
    except ValueError as exc:
        raise RlvrError(f"--resume: the checkpoint's prompt pool does not fit this run ({exc})") from None
