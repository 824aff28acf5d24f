"""What tests/e2e/test_plugins_dataset_task_runs.py, tests/integration/test_plugins_dataset_task_live.py, tests/unit/test_plugins_dataset_task.py share."""

from __future__ import annotations

import json
from pathlib import Path
from rlvr.host.registry import load_registry
from rlvr.recipe.load import load_recipe
from rlvr.recipe.resolve import load_rows, resolve


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
