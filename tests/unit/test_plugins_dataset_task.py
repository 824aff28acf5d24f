"""The built-in `dataset` task: your own JSONL / JSON / Parquet file or folder, or a hub dataset,
with column renames, split mapping, held-out splitting and validation before a model loads."""

from __future__ import annotations

import json

from rlvr.host.registry import load_registry
from rlvr.recipe.load import load_recipe
from rlvr.recipe.resolve import resolve
from helpers.plugins_dataset_task import write_jsonl, recipe, rows_of

ROWS = [{"problem": f"What is {a} * {b}?", "solution": str(a * b)} for a in range(1, 21) for b in range(1, 11)]


def test_one_file_is_split_by_hash_and_renamed(tmp_path):
    for name in ("d.jsonl", "d.json", "d.parquet"):
        data = tmp_path / name
        if name.endswith(".jsonl"):
            write_jsonl(data, ROWS)
        elif name.endswith(".json"):
            data.write_text(json.dumps({"data": ROWS}))
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(ROWS), data)
        path = recipe(tmp_path, path=str(data))
        train, test = rows_of(path, "train"), rows_of(path, "test")
        assert len(train) + len(test) == 200 and 20 < len(test) < 60, name
        assert not {r["question"] for r in train} & {r["question"] for r in test}
        assert set(train[0]) == {"question", "answer", "id"} and train[0]["answer"] == str(eval(train[0]["question"][8:-1]))


def test_a_folder_has_a_file_per_split_and_splits_map(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write_jsonl(folder / "training.jsonl", ROWS[:150])
    write_jsonl(folder / "dev.jsonl", ROWS[150:])
    path = recipe(tmp_path, path=str(folder), splits={"train": "training", "test": "dev"})
    assert len(rows_of(path, "train")) == 150 and len(rows_of(path, "test")) == 50
    held = recipe(tmp_path, path=str(folder), splits={"train": "training"})  # no test file: held out of train
    assert len(rows_of(held, "train")) + len(rows_of(held, "test")) == 150


def test_a_path_given_by_set_is_read_from_the_current_folder(tmp_path, monkeypatch):
    """In the recipe: from the recipe's folder. On the command line (`--set`) or as a Python
    override: from the current folder, as any path a command line names."""
    (tmp_path / "recipes").mkdir()
    (tmp_path / "work").mkdir()
    write_jsonl(tmp_path / "recipes" / "d.jsonl", ROWS)
    write_jsonl(tmp_path / "work" / "mine.jsonl", ROWS[:20])
    path = recipe(tmp_path / "recipes", path="d.jsonl")
    monkeypatch.chdir(tmp_path / "work")
    registry = load_registry()
    registry.use_recipe(path)
    written = load_recipe(path)
    resolve(written, registry)
    assert written.task.options["path"] == str(tmp_path / "recipes" / "d.jsonl")
    given = load_recipe(path, ["task.options.path=mine.jsonl"])
    resolve(given, registry)
    assert given.task.options["path"] == str(tmp_path / "work" / "mine.jsonl")
    as_setting = load_recipe(path, settings=[("task.options.path", "mine.jsonl")])
    resolve(as_setting, registry)
    assert as_setting.task.options["path"] == str(tmp_path / "work" / "mine.jsonl")
