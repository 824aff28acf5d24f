"""Built-in tasks: GSM8K, MATH, HumanEval, MBPP, and a procedural arithmetic task for the CPU demo.

Each loader reads an offline copy under the data dir (``RLVR_DATA_DIR``) when it is there
and the public hub id otherwise, and yields rows with the columns it registers.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from rlvr import RlvrError, hookimpl
from rlvr.kit import hub_rows, in_test_split, local_or_hub
from rlvr.kit.boxed import last_boxed
from rlvr.kit.data import SourcedRow, parse_json, placed, sourced_jsonl

T = TypeVar("T")


def gsm8k(split: str, *, data_dir: Path) -> Iterator[dict]:
    """GSM8K grade-school math word problems (answer: worked solution ending in '#### N')."""
    for i, row in enumerate(local_or_hub(data_dir / "gsm8k" / f"{split}.jsonl", "openai/gsm8k", split, "main")):
        # a column missing from a local copy is left out, for the row check to name its line
        yield placed({"id": f"gsm8k/{split}/{i}", **_taken(row, "question", "answer")}, row)


def math_task(split: str, *, data_dir: Path) -> Iterator[dict]:
    """MATH competition problems: train = MATH train (hub), test = MATH-500."""
    if split == "test":
        rows = local_or_hub(data_dir / "math500" / "test.jsonl", "HuggingFaceH4/MATH-500", "test")
    else:
        rows = local_or_hub(data_dir / "math" / f"{split}.jsonl", "DigitalLearningGmbH/MATH-lighteval", split)
    for i, row in enumerate(rows):
        solution = row.get("solution")
        answer = row.get("answer") or (last_boxed(solution) if isinstance(solution, str) else None)
        if answer is None and isinstance(solution, str):
            continue  # a handful of MATH train solutions have no boxed answer: nothing to verify
        # a column missing from a local copy is left out, for the row check to name its line
        yield placed({
            "id": row.get("unique_id") or f"math/{split}/{i}",
            **_taken(row, "problem", "solution"),
            **({"answer": answer} if answer is not None else {}),
            "subject": row.get("subject") or row.get("type", ""),
            "level": str(row.get("level", "")),
        }, row)


def humaneval(split: str, *, data_dir: Path) -> Iterator[dict]:
    """HumanEval: 164 Python functions to complete, checked by unit tests (test split only)."""
    local = data_dir / "humaneval" / "HumanEval.jsonl.gz"
    for row in local_or_hub(local, "openai/openai_humaneval", "test"):
        yield placed(_taken(row, "task_id", "prompt", "canonical_solution", "test", "entry_point"), row)


def _taken(row, *columns: str) -> dict:
    """The row's ``columns`` that it has (the row check names the line of one that lacks some)."""
    return {k: row[k] for k in columns if k in row}


def mbpp(split: str, *, data_dir: Path) -> Iterator[dict]:
    """MBPP: ~1,000 basic Python problems, each with three asserts (train/validation/test)."""
    for row in local_or_hub(data_dir / "mbpp" / f"{split}.jsonl", "google-research-datasets/mbpp", split, "full"):
        built = _taken(row, "task_id", "text", "code", "test_list")  # the row check names a missing one's line
        if "task_id" in built:
            built["task_id"] = str(built["task_id"])
        built["test_setup_code"] = row.get("test_setup_code", "")
        if isinstance(built.get("test_list"), (list, tuple)):
            built["test_list"] = list(built["test_list"])
            built["tests"] = "\n".join(built["test_list"])  # for prompts: one assert per line
        yield placed(built, row)


def held_out_draws(split: str, size: int, max_attempts: int, draw: Callable[[], tuple[str, Callable[[], T]]]) -> Iterator[T]:
    """Up to ``size`` items of a generated task's ``split`` ("train" or "test").

    ``draw()`` returns an item's key (its text) and a function that builds the item; only
    items whose key hashes into ``split`` are built, so no test item is ever trained on. Train
    may repeat keys; test never does, and stops after ``max_attempts`` draws when the space of
    keys is smaller than ``size``.
    """
    want_test = split == "test"
    seen: set[str] = set()
    produced = 0
    for _ in range(max_attempts):
        if produced >= size:
            return
        key, build = draw()
        if in_test_split(key) != want_test or (want_test and key in seen):
            continue
        seen.add(key)
        yield build()
        produced += 1


def arithmetic(
    split: str,
    *,
    data_dir: Path,
    size: int = 2000,
    seed: int = 0,
    max_operand: int = 20,
    operations: str = "+-*",
    terms: int = 2,
) -> Iterator[dict]:
    """Procedural arithmetic ('What is 7 + 12 * 3?'), deterministic, with truly held-out test items.

    Each expression belongs to one split by a hash of its text (one in five goes to test), so no
    test question ever appears in train. Train may repeat questions; test never does, and yields
    fewer than ``size`` rows when the space of expressions is smaller than that.
    """
    del data_dir  # generated, not read
    if split not in ("train", "test"):
        raise RlvrError(f"task 'arithmetic' has splits train and test, not {split!r}")
    if not operations or set(operations) - set("+-*"):
        raise RlvrError(f"task 'arithmetic': operations must use + - * only, got {operations!r}")
    if max_operand < 1 or terms < 2:
        raise RlvrError("task 'arithmetic': needs max_operand >= 1 and terms >= 2")
    space = (max_operand ** terms) * len(operations) ** (terms - 1)
    rng = random.Random(f"arithmetic/{seed}/{split}")

    def draw():
        numbers = [rng.randint(1, max_operand) for _ in range(terms)]
        ops = [rng.choice(operations) for _ in range(terms - 1)]
        expression = str(numbers[0]) + "".join(f" {op} {n}" for op, n in zip(ops, numbers[1:]))
        # eval: our own digits and + - *; only for drawn items of this split
        return expression, lambda: {"question": f"What is {expression}?",
                                    "answer": str(eval(expression, {"__builtins__": {}}))}  # noqa: S307

    for i, row in enumerate(held_out_draws(split, size, 20 * size + 10 * space, draw)):
        yield {"id": f"arithmetic/{split}/{i}", **row}


# Two-step word problems with large numbers: (question template, answer as a function of the
# numbers, ranges of a, b, c, d). Each needs a product of numbers a 135M model cannot multiply
# in its head, and a second operation to read from the words.
_WORD_TEMPLATES: list[tuple[str, Callable[..., int], tuple[tuple[int, int], ...]]] = [
    ("A warehouse has {a} boxes with {b} bottles in each. {c} bottles are shipped out. How many bottles are left?",
     lambda a, b, c, d: a * b - c, ((100, 999), (12, 99), (100, 999), (0, 0))),
    ("A school buys {a} packs of {b} pencils and {c} single pencils. How many pencils does it buy in all?",
     lambda a, b, c, d: a * b + c, ((100, 999), (12, 99), (10, 99), (0, 0))),
    ("A train carries {a} passengers on each trip and makes {b} trips a day. How many passengers does it carry "
     "in {c} days?", lambda a, b, c, d: a * b * c, ((100, 999), (2, 12), (2, 9), (0, 0))),
    ("Tickets cost {a} dollars each. A club buys {b} tickets and pays with {c} dollars. How much change does it get?",
     lambda a, b, c, d: c - a * b, ((12, 99), (12, 99), (10000, 20000), (0, 0))),
    ("A farm has {a} rows of {b} trees. Then {c} more rows of {b} trees are planted. How many trees are there now?",
     lambda a, b, c, d: (a + c) * b, ((100, 999), (12, 99), (10, 99), (0, 0))),
    ("A printer prints {a} pages a minute. How many pages does it print in {b} hours?",
     lambda a, b, c, d: a * b * 60, ((12, 99), (2, 12), (0, 0), (0, 0))),
    ("Each of {a} workers earns {b} dollars a week. How much do they earn together in {c} weeks?",
     lambda a, b, c, d: a * b * c, ((12, 99), (100, 999), (2, 9), (0, 0))),
    ("A library has {a} shelves with {b} books each. It gives {c} books to each of {d} schools. How many books "
     "does it have left?", lambda a, b, c, d: a * b - c * d, ((100, 999), (12, 99), (10, 99), (2, 9))),
]


def word_problems(split: str, *, data_dir: Path, size: int = 2000, seed: int = 0) -> Iterator[dict]:
    """Procedural two-step word problems with large numbers ("A warehouse has 347 boxes with 24
    bottles in each. 512 bottles are shipped out. How many bottles are left?"), 8 templates,
    whole-number answers; held out as ``arithmetic`` is (one question in five goes to test)."""
    del data_dir  # generated, not read
    if split not in ("train", "test"):
        raise RlvrError(f"task 'word_problems' has splits train and test, not {split!r}")
    rng = random.Random(f"word_problems/{seed}/{split}")

    def draw():
        template, answer, ranges = rng.choice(_WORD_TEMPLATES)
        a, b, c, d = (rng.randint(lo, hi) for lo, hi in ranges)
        question = template.format(a=a, b=b, c=c, d=d)
        return question, lambda: {"question": question, "answer": str(answer(a, b, c, d))}

    for i, row in enumerate(held_out_draws(split, size, 20 * size, draw)):
        yield {"id": f"word_problems/{split}/{i}", **row}


DATA_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")


def dataset(split: str, *, data_dir: Path, path: Path | None = None, hub: str | None = None, config: str | None = None,
            columns: list[str] | None = None, rename: dict[str, str] | None = None,
            splits: dict[str, str] | None = None) -> Iterator[dict]:
    """Your own data: a local file (``path``: .jsonl, .json or .parquet) or folder (one such file
    per split, ``<folder>/<split>.jsonl``; a relative path is read from the recipe's folder, as
    every task option annotated ``Path``), or a hub dataset (``hub`` id, ``config``). ``columns``
    lists the columns the recipe uses (default: those of the first row; every row is checked
    for what the prompt and rewards need before a model loads); ``rename`` maps a column to the
    source's name for it (``{question: problem}``); ``splits`` maps a split to the source's name
    for it. A single file, and a folder without a test file, are split by a hash of each row: one
    in five is ``test``, the others ``train``."""
    del data_dir, columns  # the user's own data, as given; columns are the recipe's check
    if (path is None) == (hub is None):
        raise RlvrError("task 'dataset': give one of path (a local file or folder) and hub (a dataset id)")
    source = (splits or {}).get(split, split)
    if hub is not None:
        rows, hashed = hub_rows(hub, source, config), False
    else:
        rows, hashed = _local_rows(Path(path).expanduser(), split, splits or {})
    for i, row in enumerate(rows):
        row = row.copy() if isinstance(row, dict) else dict(row)  # a SourcedRow's copy keeps its file and line
        for new, old in (rename or {}).items():
            if old in row:
                row[new] = row.pop(old)
        if hashed and (split == "test") != in_test_split(row):
            continue
        row.setdefault("id", f"dataset/{split}/{i}")
        yield row


def _local_rows(where: Path, split: str, names: dict[str, str]):
    """(rows, whether to split them by hash): a file is the whole dataset; a folder has a file
    per split (``names`` maps a split to its file's name), and when it has no test file, train
    and test are both held out of its train file, by hash (neither sees the other's rows)."""
    if where.is_file():
        return _read_file(where), True
    if not where.is_dir():
        raise RlvrError(f"task 'dataset': no file or folder at {where}")

    def file_of(name: str) -> Path | None:
        name = names.get(name, name)
        return next((where / f"{name}{s}" for s in DATA_SUFFIXES if (where / f"{name}{s}").is_file()), None)

    if split in ("train", "test") and file_of("test") is None:
        if file_of("train") is None:
            raise RlvrError(f"task 'dataset': {where} has neither a {names.get('train', 'train')} nor a "
                            f"{names.get('test', 'test')} file (.jsonl, .json, .parquet)")
        return _read_file(file_of("train")), True
    found = file_of(split)
    if found is None:
        raise RlvrError(f"task 'dataset': {where} has no {names.get(split, split)} file (.jsonl, .json, .parquet)")
    return _read_file(found), False


def _read_file(path: Path):
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        return sourced_jsonl(path)
    if name.endswith(".json"):
        try:
            data = parse_json(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RlvrError(f"{path}: not a readable JSON file ({exc})") from None
        data = data.get("data", data) if isinstance(data, dict) else data
        if not isinstance(data, list):
            raise RlvrError(f"{path}: a JSON dataset is a list of rows (or {{\"data\": [rows]}})")
        return _sourced(data, path)
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path).to_pylist()
        except Exception as exc:  # noqa: BLE001 - pyarrow's own errors, one line
            raise RlvrError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc})") from None
        return _sourced(table, path)
    raise RlvrError(f"{path}: a dataset file ends in {', '.join(DATA_SUFFIXES)}")


def _sourced(rows: list, path: Path) -> list:
    """The rows of a JSON or Parquet file, each that is a mapping knowing its place ("row 17")."""
    return [SourcedRow(row, path, f"row {i}") if isinstance(row, dict) else row for i, row in enumerate(rows, 1)]


@hookimpl
def rlvr_register_tasks(register):
    register("gsm8k", gsm8k, columns=["id", "question", "answer"])
    register("math", math_task, columns=["id", "problem", "solution", "answer", "subject", "level"])
    register("humaneval", humaneval, columns=["task_id", "prompt", "canonical_solution", "test", "entry_point"], splits=["test"])
    register("mbpp", mbpp, columns=["task_id", "text", "code", "test_list", "test_setup_code", "tests"], splits=["train", "validation", "test", "prompt"])
    register("arithmetic", arithmetic, columns=["id", "question", "answer"])
    register("word_problems", word_problems, columns=["id", "question", "answer"])
    register("dataset", dataset, columns=[])  # its columns: the recipe's task.options.columns
