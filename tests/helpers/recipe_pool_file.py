"""What tests/e2e/test_recipe_pool_file_runs.py, tests/unit/test_recipe_pool_file.py share."""

import json
from pathlib import Path

from rlvr.recipe.load import load_recipe
from rlvr.recipe.pool_file import pool_record

RATES = [0.0, 0.25, 1.0, 0.5, 0.0, 0.75, 1.0, 0.25, 0.5, 0.0, 1.0, 0.25]  # row i's pass rate


BASE = """
name: t
task: {name: arithmetic, options: {size: 12}}
prompt: {template: "{{question}}"}
rewards: {math: 1.0}
sampling: {num_generations: 4, temperature: 0.7, max_tokens: 24}
trainer: {rollout_batch_size: 16, micro_batch_size: 4}
"""


def load_recipe_text(folder: Path, extra: str, overrides=()):
    path = folder / "r.yaml"
    path.write_text(BASE + extra)
    return load_recipe(path, list(overrides))


def write_pool(path: Path, rows, rates=RATES, task="arithmetic", split="train", ids=True) -> Path:
    with open(path, "w") as f:
        for i, (row, rate) in enumerate(zip(rows, rates)):
            passed = int(rate * 4)
            record = pool_record(task, split, i, row if ids else {}, [True] * passed + [False] * (4 - passed))
            f.write(json.dumps(record) + "\n")
    return path


# ---------------------------------------------------------------------------- reading and selecting
def pooled(tmp_path, rows, extra="", **kw):
    path = write_pool(tmp_path / "pool.jsonl", rows, **kw)
    return load_recipe_text(tmp_path, f"data: {{pool_file: {path}{extra}}}\n")
