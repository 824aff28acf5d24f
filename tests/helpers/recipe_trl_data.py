"""What tests/e2e/test_recipe_trl_data_runs.py, tests/unit/test_recipe_trl_data.py share."""

from __future__ import annotations

import json
from rlvr.recipe.load import load_recipe


TRL_ROWS = [{"prompt": [{"role": "system", "content": "Reply with a number."},
                        {"role": "user", "content": f"What is {a} + {b}?"}], "solution": str(a + b)}
            for a in range(1, 11) for b in range(1, 6)]


def trl_recipe(tmp_path, rows, prompt=None, rewards=None):
    data = tmp_path / "trl.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = {"name": "trl", "task": {"name": "dataset", "options": {"path": str(data), "columns": ["prompt", "solution"]}},
              "rewards": rewards or {"math": {"weight": 1.0, "columns": {"answer": "solution"}}}}
    if prompt is not None:
        recipe["prompt"] = prompt
    (tmp_path / "r.yaml").write_text(json.dumps(recipe))
    return load_recipe(tmp_path / "r.yaml")
