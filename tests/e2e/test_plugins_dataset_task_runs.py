"""The built-in `dataset` task: the checks that run `rlvr` or other processes end to end (the e2e
ring; the others: tests/integration/test_plugins_dataset_task_live.py,
tests/unit/test_plugins_dataset_task.py)."""

from __future__ import annotations

import json

import pytest

from helpers import one_line_error, run_rlvr
from rlvr import RlvrError
from rlvr.host.registry import load_registry
from rlvr.recipe.load import load_recipe
from rlvr.recipe.resolve import resolve
from helpers.plugins_dataset_task import write_jsonl, recipe, rows_of

ROWS = [{"problem": f"What is {a} * {b}?", "solution": str(a * b)} for a in range(1, 21) for b in range(1, 11)]


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
