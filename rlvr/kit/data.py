"""Reading datasets: local JSONL files first (offline), a hub id otherwise."""

from __future__ import annotations

import gzip
import json
import os
import socket
import zlib
from pathlib import Path
from urllib.parse import urlparse
from typing import Any, Iterator, Mapping

from rlvr import RlvrError


def parse_json(text: str | bytes) -> Any:
    """``json.loads``, but JSON nested deeper than Python's stack allows (a hostile file: ``[[[[...``)
    is a ``JSONDecodeError`` like any other bad JSON, not a ``RecursionError``: every reader of a
    user's JSON catches one error and says one line."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text if isinstance(text, str) else "", 0) from None


def read_jsonl(path: str | Path) -> Iterator[dict]:
    """The JSON objects of a JSONL file (``.gz``: gzip), skipping blank lines.

    Lines are decoded one at a time, so bad bytes, bad JSON and non-objects are all reported
    with their line number, as one-line ``RlvrError``s; so are unreadable files.
    """
    for _, row in numbered_jsonl(path):
        yield row


def sourced_jsonl(path: str | Path) -> Iterator[SourcedRow]:
    """``read_jsonl``'s objects as :class:`SourcedRow`s that know their file and line, for a
    dataset whose rows are checked (``rlvr.recipe.rows``)."""
    path = Path(path)
    for number, row in numbered_jsonl(path):
        yield SourcedRow(row, path, f"line {number}")


class SourcedRow(dict):
    """A dataset row that knows where it was read (``source``: the file, and "line 21" or "row
    17" in it), so that a check of the row can name the place a user can open. The place is an
    attribute, not a column: templates, rewards, ``in_test_split``'s hash and JSON see the row's
    columns only. ``copy()`` keeps the place (``dict(row)`` drops it)."""

    __slots__ = ("source",)

    def __init__(self, columns: Mapping[str, Any], path: Path, place: str):
        super().__init__(columns)
        self.source = (path, place)

    def copy(self) -> SourcedRow:
        return SourcedRow(self, *self.source)

    def __reduce__(self):  # pickled (to a worker process) as the plain dict it stands for
        return dict, (dict(self),)


def placed(columns: dict, like: Mapping[str, Any]) -> dict:
    """``columns`` as a row read where ``like`` was (a :class:`SourcedRow`'s file and line), for
    a loader that builds its rows from a file's; a plain ``like`` leaves them as they are."""
    source = getattr(like, "source", None)
    return columns if source is None else SourcedRow(columns, *source)


def numbered_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """``read_jsonl``'s objects with their line numbers, for a caller's own errors about a record."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise RlvrError(
                        f"{path}:{number}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
                    ) from None
                if not line.strip():
                    continue
                try:
                    row = parse_json(line)
                except json.JSONDecodeError as exc:
                    raise RlvrError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
                if not isinstance(row, dict):
                    raise RlvrError(f"{path}:{number}: each line must be a JSON object")
                yield number, row
    except (OSError, EOFError) as exc:  # unreadable, a folder, a corrupt or cut-short .gz
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise RlvrError(f"{path}: cannot read: {why}") from None


def hub_reachable(timeout: float = 3.0) -> bool:
    """Can we open a TCP connection to the hub? True when a proxy is configured (we cannot tell)."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((url.hostname, url.port or (80 if url.scheme == "http" else 443)), timeout).close()
    except OSError:
        return False
    return True


def _go_offline() -> None:
    """Cache-only hub access from now on (what HF_HUB_OFFLINE=1 does at start-up)."""
    import datasets
    import huggingface_hub.constants

    datasets.config.HF_HUB_OFFLINE = True
    huggingface_hub.constants.HF_HUB_OFFLINE = True


def local_or_hub(
    local: Path, hub_id: str, split: str, config: str | None = None
) -> Iterator[dict]:
    """Rows from ``local`` when it exists (:class:`SourcedRow`s that know their line), else from
    the hub (needs network or a warm HF cache).

    With no route to the hub, the hub's cache is still tried, but without the ~25 s of retries
    the datasets library would spend before giving up.
    """
    if local.exists():
        yield from sourced_jsonl(local)
        return
    try:
        named = local.relative_to(data_dir())
    except ValueError:
        named = local
    yield from hub_rows(hub_id, split, config, f"no local copy at {local}, and ",
                        f"set RLVR_DATA_DIR to a folder holding {named} (the split as JSONL), or use a machine "
                        "that reaches the hub")


def hub_rows(hub_id: str, split: str, config: str | None = None, lead: str = "",
             offline_hint: str = "set RLVR_DATA_DIR to a folder holding the data offline") -> Iterator[dict]:
    """A hub dataset's split (network, or a warm HF cache), without the ~25 s of retries the
    datasets library spends when the hub is unreachable; one-line ``RlvrError`` when it cannot be had."""
    import datasets

    offline = datasets.config.HF_HUB_OFFLINE or not hub_reachable()
    if offline:
        _go_offline()
    try:
        ds = datasets.load_dataset(hub_id, config, split=split)
    except Exception as exc:
        why = "the hub is unreachable and it is not in the hub cache" if offline else \
            f"loading it from the hub failed ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})"
        raise RlvrError(f"{lead}{hub_id!r} split {split!r}: {why}; {offline_hint}") from None
    yield from ds


def data_dir() -> Path:
    """Where offline copies of datasets live: ``RLVR_DATA_DIR`` or the user cache."""
    env = os.environ.get("RLVR_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return cache_dir() / "data"


def cache_dir() -> Path:
    base = os.environ.get("RLVR_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rlvr"
    )
    return Path(base)


TEST_SHARE = 5  # one item in five belongs to a generated or unsplit dataset's test split


def in_test_split(item: str | Mapping[str, Any]) -> bool:
    """Whether ``item`` (its text, or a row: its JSON with sorted keys) belongs to the held-out
    test split of a dataset that comes without one (one in ``TEST_SHARE``, by a hash of the
    text: the same item always falls on the same side, whatever else the dataset holds)."""
    key = item if isinstance(item, str) else json.dumps(item, sort_keys=True, default=str)
    return zlib.crc32(key.encode()) % TEST_SHARE == 0
