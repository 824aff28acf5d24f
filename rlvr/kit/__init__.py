"""The toolkit for plugin authors: what the built-in plugins use, public for everyone.

A plugin imports the hook API from ``rlvr`` (``hookimpl``, ``Score``, ``RlvrError``, ``Reply``)
and its helpers from here, nothing else of rlvr: the built-in plugins in ``plugins/`` do the
same (``tests/test_layout.py`` fails when one imports a private module). What is here:

- text: ``completion_text`` (a completion's plain text, string or chat), ``one_line``
  (an error message on one line);
- worker processes with a hard deadline per item, for checkers that may hang in C code:
  ``DeadlinePool``, ``shared_pool``, ``Result``, ``PoolBroken``;
- data: ``read_jsonl`` (line-numbered one-line errors), ``local_or_hub`` (a local file or
  folder first, a hub id when online);
- scoring: ``soft_overlong_penalty`` (DAPO's length shaping).

May import: rlvr (the hook API) only; every other part of rlvr may import it.
"""

from rlvr.kit.data import local_or_hub, read_jsonl
from rlvr.kit.scoring import soft_overlong_penalty
from rlvr.kit.text import completion_text, one_line
from rlvr.kit.workers import DeadlinePool, PoolBroken, Result, shared_pool

__all__ = [
    "completion_text", "one_line",
    "DeadlinePool", "PoolBroken", "Result", "shared_pool",
    "local_or_hub", "read_jsonl",
    "soft_overlong_penalty",
]
