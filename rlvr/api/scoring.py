"""``rlvr.api.RewardScorer``: one reward scoring records as ``rlvr score`` scores them, from Python
(a service that wraps a reward, such as examples/reward-server, or a notebook).

The reward is found among the installed plugins (or as a ``module:function`` reference), its
options are checked as a recipe's are, and ``score`` calls it through rlvr's reward runner
(``rlvr.rewards.runner``): the same per-record isolation as in training, a failure spoiling only
the records it concerns, with its reason in the record's info.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rlvr import RlvrError
from rlvr.host.registry import load_registry
from rlvr.kit import completion_text
from rlvr.rewards.runner import BoundReward, score_batch


class RewardScorer:
    """``RewardScorer("format", {"think": True}).score([{"prompt": ..., "completion": ...}])``:
    one ``(value, info)`` per record, ``value`` None where the reward could not score it. A
    record is a mapping with ``completion`` (text, or chat messages whose last assistant turn is
    scored), an optional ``prompt`` (text) and the reward's columns. Raises ``RlvrError`` for an
    unknown reward, a wrong option, a malformed record or a record without a column the reward
    requires."""

    def __init__(self, reward: str, options: Mapping[str, Any] | None = None):
        self.reward = BoundReward(load_registry().reward(reward), 1.0, dict(options or {}))

    @property
    def name(self) -> str:
        return self.reward.name

    def score(self, records: Sequence[Mapping[str, Any]], first_record: int = 1) -> list[tuple[float | None, dict]]:
        """Score ``records`` as one batch; ``first_record`` is the number of ``records[0]`` in the
        caller's whole input, for messages."""
        for i, record in enumerate(records):
            where = f"record {first_record + i}"
            if not isinstance(record, Mapping):
                raise RlvrError(f"{where} is a {type(record).__name__}, not an object of columns")
            if not isinstance(record.get("completion"), (str, list, dict)):
                raise RlvrError(f"{where} has no 'completion' (text, or chat messages)")
            if not isinstance(record.get("prompt", ""), (str, type(None))):
                raise RlvrError(f"{where}: 'prompt' is a {type(record['prompt']).__name__}, not text")
        if not records:
            return []
        batch = score_batch([self.reward], [record.get("prompt") or "" for record in records],
                            [completion_text(record["completion"]) for record in records],
                            [record.get("completion_ids") for record in records], [dict(r) for r in records],
                            first_record)
        return list(zip(batch.values[self.name], batch.infos[self.name]))
