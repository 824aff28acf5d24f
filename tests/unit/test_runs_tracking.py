"""trainer.report_to: a named tracker must be installed (one line otherwise, before any model
loads); trackio, local-first, gets every step's row under the step number the console shows."""

from __future__ import annotations

import math

import pytest

from rlvr import RlvrError
from rlvr.runs import tracking
from rlvr.runs.tracking import Trackers, check_trackers


def test_a_named_tracker_must_be_installed(monkeypatch):
    monkeypatch.setattr(tracking, "_installed", lambda name: name != "wandb")
    assert check_trackers(["trackio", "tensorboard", "trackio"]) == ["trackio", "tensorboard"]
    with pytest.raises(RlvrError) as err:
        check_trackers(["tensorboard", "wandb"])
    assert str(err.value) == ("trainer.report_to names 'wandb', which is not installed: pip install 'rlvr[wandb]' "
                              "(in a checkout of rlvr: pip install -e '.[wandb]'); or leave it out of trainer.report_to")
    assert check_trackers(None) == ["tensorboard"] and check_trackers([]) == []
    monkeypatch.setattr(tracking, "_installed", lambda name: False)
    assert check_trackers(None) == []  # the default asks for nothing that is missing


def test_validate_refuses_a_missing_tracker_in_one_line(monkeypatch):
    from pathlib import Path

    from rlvr.cli.common import load_resolved, cli_registry

    monkeypatch.setattr(tracking, "_installed", lambda name: name != "wandb")
    demo = Path(__file__).resolve().parents[2] / "tasks/demo.yaml"
    with pytest.raises(RlvrError, match=r"which is not installed: pip install 'rlvr\[wandb\]'"):
        load_resolved(demo, ["trainer.report_to=[wandb]"], None, cli_registry())
    assert load_resolved(demo, ["trainer.report_to=[trackio]"], None, cli_registry()).trainer.report_to == ["trackio"]


def test_trackio_offline_gets_each_row_at_its_step(tmp_path, monkeypatch):
    # trackio reads TRACKIO_DIR once, when imported: set before; and a project of this test's own,
    # in case trackio was imported before (its folder then outlives the test, and so do its runs).
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    pytest.importorskip("trackio", reason="make test installs trackio")
    project = f"demo-{tmp_path.name}"
    rows = [{"step": 1, "reward_mean": 0.25, "loss": 0.5, "kl": math.nan, "lr": 1e-5, "note": "x"},
            {"step": 2, "reward_mean": 0.75, "loss": 0.25, "kl": 0.0, "lr": 1e-5, "note": "y"}]
    trackers = Trackers(["trackio"], output_dir=tmp_path / "run7", project=project, config={"trainer": {"steps": 2}})
    for row in rows:
        trackers.log(row)
    trackers.close()
    from trackio.sqlite_storage import SQLiteStorage

    logged = SQLiteStorage.get_logs(project, "run7")
    assert [r["step"] for r in logged] == [1, 2]
    assert [r["reward_mean"] for r in logged] == [0.25, 0.75] and "note" not in logged[0]
    assert "kl" not in logged[0] and logged[1]["kl"] == 0.0  # a NaN is left out, not logged as a number
    assert SQLiteStorage.get_run_config(project, "run7")["trainer"] == {"steps": 2}
    assert Trackers(["trackio"], output_dir=tmp_path, project="demo", config={}, enabled=False).backends == {}
