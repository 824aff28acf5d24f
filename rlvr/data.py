"""Reading datasets: local JSONL files first (offline), a hub id otherwise."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Iterator

from . import RlvrError


def read_jsonl(path: str | Path) -> Iterator[dict]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RlvrError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise RlvrError(f"{path}:{number}: each line must be a JSON object")
            yield row


def local_or_hub(
    local: Path, hub_id: str, split: str, config: str | None = None
) -> Iterator[dict]:
    """Rows from ``local`` when it exists, else from the hub (needs network or a warm HF cache)."""
    if local.exists():
        yield from read_jsonl(local)
        return
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a core dependency
        raise RlvrError(f"{local} not found and the datasets package is missing") from exc
    try:
        ds = datasets.load_dataset(hub_id, config, split=split)
    except Exception as exc:
        raise RlvrError(
            f"no local copy at {local} and loading {hub_id!r} split {split!r} from the hub failed "
            f"({type(exc).__name__}); set RLVR_DATA_DIR to a folder holding the data offline"
        ) from None
    yield from ds
