"""Pool files: each train prompt's pass rate, measured before training (``rlvr pool``), and the
train rows a recipe keeps from one (``data.pool_file``, ``data.pool_pass_range``).

One JSON object a line: ``task`` and ``split`` (where the prompt comes from), ``index`` (its place
in the split, as the task yields it), ``id`` (the row's ``id`` or ``task_id``; null when it has
none), ``n`` samples of which ``passed`` passed, and ``pass_rate`` (``passed / n``). A recipe's rows
are matched by id when every record has one, else by index; selection reads ``pass_rate`` only,
so a file made by other means needs just ``task``, ``split``, ``index`` and ``pass_rate``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from rlvr import RlvrError
from rlvr.kit.data import parse_json


def row_id(row: dict) -> Any:
    """A row's own name (``id``, else ``task_id``), or None."""
    found = row.get("id")
    return found if found is not None else row.get("task_id")


def pool_record(task: str, split: str, index: int, row: dict, passed: Sequence[bool]) -> dict:
    """The pool-file line of one prompt evaluated with ``len(passed)`` samples."""
    name = row_id(row)
    return {"task": task, "split": split, "index": index, "id": name if isinstance(name, (int, str)) else None,
            "n": len(passed), "passed": sum(passed), "pass_rate": sum(passed) / len(passed)}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def by_id(records: Sequence[dict]) -> bool:
    """Whether pool ``records`` are matched to rows by id (every record has one), else by index."""
    return all(r.get("id") is not None for r in records)


def read_pool_file(path: str | Path, label: str = "data.pool_file") -> list[dict]:
    """The records of a pool file, checked (one-line ``RlvrError`` naming ``label`` and the line
    otherwise)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise RlvrError(f"{label}: {path} {'is not a file' if path.exists() else 'not found'} "
                        "(write one with `rlvr pool RECIPE --output FILE`)")
    records, seen = [], set()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise RlvrError(f"{label}: cannot read {path}: {exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{label}: {path} line {number}"
        try:
            record = parse_json(line)
        except json.JSONDecodeError as exc:
            raise RlvrError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise RlvrError(f"{where}: not a JSON object")
        if not (isinstance(record.get("task"), str) and isinstance(record.get("split"), str)):
            raise RlvrError(f"{where}: needs 'task' and 'split' (strings)")
        index, rate, name = record.get("index"), record.get("pass_rate"), record.get("id")
        if type(index) is not int or index < 0:
            raise RlvrError(f"{where}: 'index' must be an integer >= 0")
        if not (_number(rate) and 0 <= rate <= 1):
            raise RlvrError(f"{where}: 'pass_rate' must be a number from 0 to 1")
        if isinstance(name, bool) or not isinstance(name, (int, str, type(None))):
            raise RlvrError(f"{where}: 'id' must be a string, an integer or null")
        key = ("id", name) if name is not None else ("index", index)
        if key in seen:
            raise RlvrError(f"{where}: {key[0]} {key[1]!r} is listed twice")
        seen.add(key)
        records.append(record)
    if not records:
        raise RlvrError(f"{label}: {path} lists no prompts")
    return records


def pass_range(data) -> tuple[float, float, bool]:
    """(lo, hi, inclusive) of ``data.pool_pass_range``; unset: 0 < rate < 1."""
    return (*data.pool_pass_range, True) if data.pool_pass_range is not None else (0.0, 1.0, False)


def _kept(rate: float, lo: float, hi: float, inclusive: bool) -> bool:
    return lo <= rate <= hi if inclusive else lo < rate < hi


def check_pool_file(recipe) -> tuple[list[dict], list[dict]]:
    """``data.pool_file`` read and held against the recipe (task, train split, a non-empty
    selection) without reading the task's rows: (every record, the selected ones)."""
    data = recipe.data
    records = read_pool_file(data.pool_file)
    task, split = recipe.task.name, data.train_split
    for record in records:
        if (record["task"], record["split"]) != (task, split):
            raise RlvrError(f"data.pool_file: {data.pool_file} measured task {record['task']!r} split "
                            f"{record['split']!r}, but the recipe trains on task {task!r} split {split!r}")
    lo, hi, inclusive = pass_range(data)
    chosen = [r for r in records if _kept(r["pass_rate"], lo, hi, inclusive)]
    if not chosen:
        never = sum(r["pass_rate"] == 0 for r in records)
        always = sum(r["pass_rate"] == 1 for r in records)
        span = f"[{lo}, {hi}]" if inclusive else f"({lo}, {hi}) (data.pool_pass_range unset)"
        raise RlvrError(f"data.pool_file: none of the {len(records)} prompts of {data.pool_file} has a pass rate "
                        f"in {span}: {never} never passed, {always} always passed")
    return records, chosen


def select_rows(recipe, rows: Sequence[dict]) -> list[int]:
    """The places in ``rows`` (the recipe's train rows, as loaded) of the prompts ``data.pool_file``
    keeps, in the split's order. Every record of the file must name one of ``rows``: one that does
    not means the file was measured on other data."""
    records, chosen = check_pool_file(recipe)
    if by_id(records):
        where: dict[Any, int] = {}
        for place, row in enumerate(rows):
            where.setdefault(row_id(row), place)
        missing = [r["id"] for r in records if r["id"] not in where]
        places = [where.get(r["id"]) for r in chosen]
    else:
        missing = [r["index"] for r in records if r["index"] >= len(rows)]
        places = [r["index"] for r in chosen]
    if missing:
        limit = f" (data.train_limit keeps the first {len(rows)})" if recipe.data.train_limit else ""
        raise RlvrError(f"data.pool_file: {len(missing)} of the {len(records)} prompts of {recipe.data.pool_file} "
                        f"are not among the {len(rows)} train rows{limit}, e.g. {missing[0]!r}: was it measured on "
                        "another task, other task options or another split?")
    return sorted(set(places))
