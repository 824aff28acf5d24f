"""The toolkit for plugin authors: what the built-in plugins use, public for everyone.

A plugin imports the hook API from ``rlvr`` (``hookimpl``, ``Score``, ``RlvrError``, ``Reply``)
and its helpers from here, nothing else of rlvr: the built-in plugins in ``plugins/`` do the
same (``tests/unit/test_layout.py`` fails when one imports a private module). What is here:

- text: ``completion_text`` (a completion's plain text, string or chat), ``one_line``
  (an error message on one line), ``escape_controls`` (text from outside, a program's output
  or a reward's reason, with control and invisible format characters written out);
- boxed answers: ``boxes`` (the span of every ``\\boxed{}``, in one pass), ``box_at``,
  ``last_boxed`` (the last box's content), ``BOX_RE`` (the command);
- worker processes with a hard deadline per item, for checkers that may hang in C code:
  ``DeadlinePool``, ``shared_pool``, ``Result``, ``PoolBroken``; ``close_shared`` (every
  process-wide pool stopped, as a run's end does) and ``on_close_shared`` (a plugin's own pool
  stopped with them); and the time limits around
  them: ``soft_limit`` (raises the BaseException ``SoftTimeout`` inside a worker),
  ``soft_seconds``, ``map_with_deadline``, ``unfinished`` (the score of an item that did not finish);
- data: ``read_jsonl`` (line-numbered one-line errors), ``local_or_hub`` (a local file or
  folder first, a hub id when online), ``hub_rows`` (a hub dataset's split), ``data_dir`` (where offline copies live:
  ``RLVR_DATA_DIR``), ``cache_dir`` (rlvr's cache: ``RLVR_CACHE_DIR``), ``in_test_split``
  (the held-out side of a dataset without a test split, by a hash of each item's text or row);
- scoring: ``soft_overlong_penalty`` (DAPO's length shaping);
- templates, in their own module ``rlvr.kit.template``: ``fields`` and ``fill`` for text with
  ``{{name}}`` fields (the syntax of rlvr's prompts, and of the ``judge`` reward's rubric);
- services, in their own module ``rlvr.kit.http``: ``post_json`` (JSON to a URL, with a deadline
  per attempt, retries with backoff, a cap on the answer, no redirects, the secret kept out of
  every reason), ``read_secret`` (a bearer secret from a file or an environment variable),
  ``check_url``, ``redact``, ``cleartext`` (the ``http`` and ``judge`` rewards use them);
- tools, in their own module ``rlvr.kit.tools``: ``function_schema`` (a function's JSON schema
  from its type hints and docstring), ``parse_tool_calls`` (the calls in a model's turn, Hermes
  tags or plain JSON, each valid or invalid with a kind), ``check_arguments`` (a call's arguments
  against the schema), ``tools_prompt`` (the tools as system-prompt text), ``Tool`` (the
  ``tools`` environment uses them);
- the device, in its own module ``rlvr.kit.device``: ``device_policy`` (every decision that
  differs on a GPU: dtypes, DeepSpeed's precision, devices, collectives, ``torch.cuda`` calls;
  ``RLVR_DEVICE_POLICY=cuda`` takes a GPU's decisions on a CPU), ``sampler_dtype``, ``cpu_has_bf16``
  (the ``reward_model`` reward places its scorer with it);
- files a user named, written without following a planted link: ``replacing`` (a file replaced
  whole through a temporary file, or a FIFO/device written in place), ``write_replacing``,
  ``open_append`` (a log), ``open_folder`` (a folder's descriptor, walked name by name),
  ``remove_temporaries`` (for a signal handler);
- trust: ``Unsandboxed`` (an option's values that run code outside the sandbox, which a recipe
  may choose only when its user allows it), ``unsandboxed_values``.

Every other part of rlvr may import it; it imports only the hook API.

May import: rlvr.
"""

from rlvr.kit.boxed import BOX_RE, box_at, boxes, last_boxed
from rlvr.kit.data import cache_dir, data_dir, hub_rows, in_test_split, local_or_hub, read_jsonl
from rlvr.kit.deadline import SoftTimeout, map_with_deadline, soft_limit, soft_seconds, unfinished
from rlvr.kit.files import open_append, open_folder, remove_temporaries, replacing, write_replacing
from rlvr.kit.scoring import soft_overlong_penalty
from rlvr.kit.text import completion_text, escape_controls, one_line
from rlvr.kit.trust import Unsandboxed, unsandboxed_values
from rlvr.kit.shared_pools import close_shared, on_close_shared, shared_pool
from rlvr.kit.workers import DeadlinePool, PoolBroken, Result

__all__ = [
    "completion_text", "escape_controls", "one_line",
    "BOX_RE", "box_at", "boxes", "last_boxed",
    "DeadlinePool", "PoolBroken", "Result", "shared_pool", "close_shared", "on_close_shared",
    "SoftTimeout", "map_with_deadline", "soft_limit", "soft_seconds", "unfinished",
    "cache_dir", "data_dir", "hub_rows", "in_test_split", "local_or_hub", "read_jsonl",
    "soft_overlong_penalty",
    "open_append", "open_folder", "remove_temporaries", "replacing", "write_replacing",
    "Unsandboxed", "unsandboxed_values",
]
