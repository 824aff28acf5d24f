"""The built-in `dataset` task: the checks that start worker pools or loopback services, or build a
tiny model in-process (the integration ring; the others:
tests/e2e/test_plugins_dataset_task_runs.py, tests/unit/test_plugins_dataset_task.py)."""

from __future__ import annotations


import pytest

from rlvr import RlvrError
from rlvr.recipe.rows import check_rows
from helpers.plugins_dataset_task import recipe, rows_of


def test_a_hub_dataset_that_cannot_be_had_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    path = recipe(tmp_path, hub="someorg/no-such-data", config="main")
    with pytest.raises(RlvrError, match="'someorg/no-such-data' split 'train': the hub is unreachable"):
        rows_of(path, "train")
    assert check_rows  # the same loader serves validate --data and the checks before a model loads
