"""Pool files (`rlvr pool`, data.pool_file, data.pool_pass_range) and the data.pool recipe options:
the checks that run `rlvr` or other processes end to end (the e2e ring; the others:
tests/unit/test_recipe_pool_file.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.host.registry import load_registry
from rlvr.recipe.resolve import load_rows
from rlvr.recipe.spec import TaskRef
from helpers.recipe_pool_file import pooled



@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.fixture(scope="module")
def rows(registry):
    return load_rows(registry, TaskRef(name="arithmetic", options={"size": 12}), "train")


def test_validate_refuses_a_mismatched_pool_file_with_exit_2(tmp_path, rows, rlvr_cmd):
    recipe = pooled(tmp_path, rows, task="gsm8k")
    done = rlvr_cmd("validate", tmp_path / "r.yaml")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "measured task 'gsm8k'" in done.stderr and recipe.data.pool_file in done.stderr


def test_pool_command_refuses_bad_input_before_any_model_loads(tmp_path, rlvr_cmd):
    demo = Path(__file__).resolve().parents[2] / "tasks" / "demo.yaml"
    done = rlvr_cmd("pool", demo, "--output", tmp_path / "p.jsonl", "--k", "1")
    assert done.returncode == 2 and "--k" in done.stderr and done.stderr.count("\n") == 1
    (tmp_path / "file").write_text("")
    done = rlvr_cmd("pool", demo, "--output", tmp_path / "file" / "p.jsonl")
    assert done.returncode == 2 and "is a file, not a folder" in done.stderr


def test_pool_grows_with_extend_without_measuring_a_prompt_twice(tmp_path, tiny_model, rlvr_cmd):
    """`rlvr pool` with a model (the tiny one, sampled in process), then `--extend` to more prompts:
    the first ones' records are kept as they were, the others measured and added in order."""
    demo = Path(__file__).resolve().parents[2] / "tasks" / "gsm8k.yaml"
    out = tmp_path / "pool.jsonl"
    common = ("pool", demo, "--profile", "cpu", "--model", tiny_model, "--output", out, "--k", "2",
              "--set", "sampling.backend=hf", "--set", "sampling.max_tokens=4")
    done = rlvr_cmd(*common, "--limit", "3")
    assert done.returncode == 0, done.stderr[-3000:]
    first = out.read_text().splitlines()
    assert len(first) == 3 and done.stdout.startswith("3 prompts x 2 samples: ")
    done = rlvr_cmd(*common, "--limit", "5", "--extend")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("5 prompts x 2 samples (2 measured now, 3 kept): "), done.stdout
    lines = out.read_text().splitlines()
    assert lines[:3] == first and [json.loads(line)["index"] for line in lines] == [0, 1, 2, 3, 4]
    done = rlvr_cmd(*common, "--limit", "5", "--extend", "--k", "3")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--extend" in done.stderr
    assert out.read_text().splitlines() == lines
