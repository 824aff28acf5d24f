"""The built-in `dataset` task: your own JSONL / JSON / Parquet file or folder, or a hub dataset,
with column renames, split mapping, held-out splitting and validation before a model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import one_line_error, run_rlvr
from rlvr import RlvrError
from rlvr.host.registry import load_registry
from rlvr.recipe.load import load_recipe
from rlvr.recipe.resolve import load_rows, resolve
from rlvr.recipe.rows import check_rows

ROWS = [{"problem": f"What is {a} * {b}?", "solution": str(a * b)} for a in range(1, 21) for b in range(1, 11)]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def recipe(tmp_path, **options) -> Path:
    task = {"name": "dataset", "options": {"columns": ["question", "answer"], "rename": {"question": "problem",
                                                                                         "answer": "solution"},
                                           **options}}
    path = tmp_path / "r.yaml"
    path.write_text(json.dumps({"name": "mine", "task": task, "prompt": {"template": "{{question}}"},
                                "rewards": {"math": 1.0}}))
    return path


def rows_of(path, split):
    rec = load_recipe(path)
    registry = load_registry()
    resolve(rec, registry)
    return load_rows(registry, rec.task if split == "train" else rec.eval_task, split)


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


def test_validation_before_any_model_loads(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", ROWS)
    registry = load_registry()
    no_columns = tmp_path / "n.yaml"
    no_columns.write_text(json.dumps({"name": "n", "task": {"name": "dataset", "options": {"path": str(data)}},
                                      "prompt": {"template": "{{problem}}"}, "rewards": {"math": 1.0}}))
    with pytest.raises(RlvrError, match="reward 'math' needs column 'answer' but task 'dataset' has only: id, "
                                        "problem, solution"):  # unlisted: the columns of the first row
        resolve(load_recipe(no_columns), registry)
    no_columns.write_text(json.dumps({"name": "n", "task": {"name": "dataset", "options": {"path": str(data)}},
                                      "prompt": {"template": "{{question}}"}, "rewards": {"math": 1.0}}))
    with pytest.raises(RlvrError, match="prompt uses {{question}} but task 'dataset' has no such column"):
        resolve(load_recipe(no_columns), registry)
    empty = write_jsonl(tmp_path / "empty.jsonl", [])
    no_columns.write_text(json.dumps({"name": "n", "task": {"name": "dataset", "options": {"path": str(empty)}},
                                      "prompt": {"template": "{{problem}}"}, "rewards": {"math": 1.0}}))
    with pytest.raises(RlvrError, match="has no rows to read its columns from"):
        resolve(load_recipe(no_columns), registry)
    wrong = recipe(tmp_path, path=str(data), columns=["question", "solution"], rename={"question": "problem"})
    with pytest.raises(RlvrError, match="reward 'math' needs column 'answer'"):
        resolve(load_recipe(wrong), registry)
    # rows without a listed column are found by validate --data, with the file and line named
    bad = write_jsonl(tmp_path / "bad.jsonl", ROWS[:50] + [{"problem": "What is 1 * 1?"}] + ROWS[50:])
    out = run_rlvr("validate", "--data", recipe(tmp_path, path=str(bad)))
    one_line_error(out, f"{bad} line 51: no column 'answer' (the reward 'math' needs it)")
    ok = run_rlvr("validate", "--data", recipe(tmp_path, path=str(data)))
    assert ok.returncode == 0 and "rows of task 'dataset' read" in ok.stdout, ok.stderr
    missing = recipe(tmp_path, path=str(tmp_path / "nope.jsonl"))
    with pytest.raises(RlvrError, match="no file or folder at"):
        rows_of(missing, "train")
    both = recipe(tmp_path, path=str(data), hub="org/name")
    with pytest.raises(RlvrError, match="give one of path"):
        rows_of(both, "train")


def test_a_hub_dataset_that_cannot_be_had_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    path = recipe(tmp_path, hub="someorg/no-such-data", config="main")
    with pytest.raises(RlvrError, match="'someorg/no-such-data' split 'train': the hub is unreachable"):
        rows_of(path, "train")
    assert check_rows  # the same loader serves validate --data and the checks before a model loads


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
