"""The ``http`` reward: a service of your own scores the completions, one POST a batch.

Each call sends the batch's records as JSON, ``batch_size`` records a request, at most
``max_concurrent`` requests at a time, to ``url``, with ``Authorization: Bearer <secret>`` when
the user gave a secret for its host (``--secret HOST=FILE``, ``RLVR_SECRETS``; never the
recipe). The wire format (docs/rewards.md shows it too)::

    POST <url>        Content-Type: application/json
    {"records": [{"prompt": "...", "completion": "...", "<column>": <value>, ...}, ...]}

    200 OK
    {"scores": [0.5, null, {"score": 1, "why": "...", "info": {...}}, ...]}

A record holds the prompt (its text), the completion (its text; a chat completion's last
assistant turn) and each column ``send_columns`` names, with its value in the task's row (any
JSON value; ``null`` for a record whose row lacks the column). ``scores`` holds one item per
record, in order: a number (a finite JSON number; ``true``/``false`` are not scores); ``null``,
the record could not be scored; or an object whose ``score`` is a number or ``null``, with an
optional ``why`` (a string: the reason, for ``null``) and ``info`` (an object, kept in the
record's ``reward_info``).

Every failure spoils only the records it concerns and never raises into training: a request
that got no usable answer (refused, timed out, 5xx after its retries, a redirect, an answer over
``max_response_bytes``, not JSON, or without a ``scores`` list of one item per record) leaves
that request's records ``None``, a score that is not a number
leaves its own record ``None``, each with the reason in ``info["why"]``. The run's rule for what
cannot be scored (``when_unscored``, ``trainer.max_unscored_steps``) takes it from there. A
request ends within ``(retries + 1) * timeout_s`` plus its backoff (``rlvr.kit.http``); a call
within that times ``ceil(requests / max_concurrent)``.

Each request's cost goes into the step's metrics (``Score.metrics``, ``reward/http/<key>``), on
the first record it carried: ``requests`` 1, ``retries`` (attempts after the first),
``failed_requests`` 1 when it got no usable answer, and its ``seconds`` (summed: the time spent
waiting, requests overlapping), ``seconds_mean`` (per request) and ``seconds_max``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from annotated_types import Ge, Le
from pydantic import AfterValidator, BeforeValidator

from rlvr import Score, hookimpl
from rlvr.kit import completion_text, escape_controls, one_line
from rlvr.kit.http import HttpFailure, post_json, redact

from .services import Backoff, Concurrency, ResponseBytes, Retries, Seconds, Url, secret_for

__all__ = ["http_reward", "read_scores", "rlvr_register_rewards"]

DEFAULT_URL = "http://127.0.0.1:8400/score"  # examples/reward-server's default address
ALWAYS_SENT = ("prompt", "completion")


def _column_names(names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if not name.strip():
            raise ValueError("a column name is empty")
        if name in ALWAYS_SENT:
            raise ValueError(f"{name!r} is always sent: name only the task's other columns")
    return tuple(dict.fromkeys(names))


# One name alone (``send_columns: answer``) is a list of one.
Columns = Annotated[tuple[str, ...], BeforeValidator(lambda v: [v] if isinstance(v, str) else v),
                    AfterValidator(_column_names)]
BatchSize = Annotated[int, Ge(1), Le(100_000)]


@hookimpl
def rlvr_register_rewards(register: Any) -> None:
    register("http", http_reward,
             description="a service of yours scores the batch: POST {records: [...]} to url, get {scores: [...]} "
             "(docs/rewards.md)")


def http_reward(
    prompts: list[str],
    completions: list[Any],
    completion_ids: list[Any],
    *,
    url: Url = DEFAULT_URL,
    send_columns: Columns = (),
    batch_size: BatchSize = 64,
    max_concurrent: Concurrency = 4,
    timeout_s: Seconds = 30.0,
    retries: Retries = 2,
    backoff_s: Backoff = 0.5,
    max_response_bytes: ResponseBytes = 4 << 20,
    **columns: list[Any],
) -> list[Score]:
    n = len(completions)
    secret, problem = secret_for("http", url)
    if problem:
        return [Score(None, {"why": problem})] * n
    absent = [c for c in send_columns if c not in columns]
    if absent:
        why = f"send_columns names {absent[0]!r}, which none of the batch's records has"
        return [Score(None, {"why": why})] * n
    scores: list[Score | None] = [None] * n
    encoded: list[tuple[int, bytes]] = []
    for i in range(n):
        record = {"prompt": prompts[i], "completion": completion_text(completions[i]),
                  **{c: columns[c][i] for c in send_columns}}
        try:
            encoded.append((i, json.dumps(record, ensure_ascii=False, allow_nan=False, default=_plain).encode()))
        except (TypeError, ValueError) as exc:
            scores[i] = Score(None, {"why": f"the record cannot be sent as JSON: {one_line(exc, 200)}"})
    requests = [encoded[k : k + batch_size] for k in range(0, len(encoded), batch_size)]

    def ask(part: list[tuple[int, bytes]]) -> list[Score]:
        payload = b'{"records": [' + b", ".join(body for _, body in part) + b"]}"
        start = time.perf_counter()
        try:
            answer = post_json(url, payload, secret=secret, timeout_s=timeout_s, retries=retries,
                               backoff_s=backoff_s, max_response_bytes=max_response_bytes)
        except HttpFailure as failure:
            failed = [Score(None, {"why": str(failure), "http": {"attempts": failure.attempts}})] * len(part)
            return _costed(failed, time.perf_counter() - start, failure.attempts, failed=True)
        http = {"status": answer.status, "attempts": answer.attempts, "seconds": round(answer.seconds, 4)}
        scores = read_scores(redact(answer.body, secret), len(part), http)  # what a server says back is shown
        return _costed(scores, answer.seconds, answer.attempts)

    if requests:
        with ThreadPoolExecutor(max_workers=min(max_concurrent, len(requests)),
                                thread_name_prefix="rlvr-http-reward") as pool:
            for part, part_scores in zip(requests, pool.map(ask, requests)):
                for (i, _), score in zip(part, part_scores):
                    scores[i] = score
    return scores  # type: ignore[return-value]


def _costed(scores: list[Score], seconds: float, attempts: int, failed: bool = False) -> list[Score]:
    """``scores`` (one request's), the first with the request's metrics (the module docstring's)."""
    cost = {"requests": 1, "retries": attempts - 1, "failed_requests": int(failed), "seconds": seconds,
            "seconds_mean": seconds, "seconds_max": seconds}
    return [dataclasses.replace(scores[0], metrics=cost), *scores[1:]] if scores else scores


def _plain(value: Any) -> Any:
    """A column value JSON has no type for: numpy's scalars and arrays as numbers and lists."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    raise TypeError(f"a {type(value).__name__} is not JSON")


def read_scores(body: Any, count: int, http: dict | None = None) -> list[Score]:
    """The ``count`` scores of an answer in the wire format (see the module docstring): each a
    ``Score``, ``None``-valued with ``info["why"]`` where it is no number. ``http`` (status,
    attempts, seconds) goes into every score's ``info["http"]``."""
    http = dict(http or {})
    if not isinstance(body, dict) or not isinstance(body.get("scores"), list):
        what = "an object without a 'scores' list" if isinstance(body, dict) else f"a JSON {_kind(body)}"
        return [Score(None, {"why": f"the answer is {what}, not {{\"scores\": [...]}}", "http": http})] * count
    items = body["scores"]
    if len(items) != count:
        why = f"the answer has {len(items)} scores for {count} records"
        return [Score(None, {"why": why, "http": http})] * count
    return [_score(item, k, http) for k, item in enumerate(items)]


def _score(item: Any, k: int, http: dict) -> Score:
    info: dict[str, Any] = {}
    value, why = item, None
    if isinstance(item, dict):
        if "score" not in item:
            return Score(None, {"why": f"score {k} is an object without 'score'", "http": http})
        value, why, extra = item["score"], item.get("why"), item.get("info")
        if isinstance(extra, dict):
            info.update(extra)
        elif extra is not None:
            info["server_info"] = extra
    if why is not None:
        info["why"] = escape_controls(one_line(str(why), 500))
    info["http"] = http
    if value is None:
        info.setdefault("why", "the server returned null without a reason")
        return Score(None, info)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        text = json.dumps(value)[:40]
        info["why"] = f"score {k} is a JSON {_kind(value)} ({text}), not a number"
        return Score(None, info)
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        info["why"] = f"score {k} is {json.dumps(value)[:40]}, not a finite number"
        return Score(None, info)
    return Score(number, info)


def _kind(value: Any) -> str:
    kinds = {bool: "boolean", str: "string", list: "array", dict: "object", type(None): "null"}
    return kinds.get(type(value), "number" if isinstance(value, (int, float)) else type(value).__name__)
