"""A run folder tells the truth: the checks that start worker pools or loopback services, or build a
tiny model in-process (the integration ring; the others: tests/e2e/test_runs_folders_runs.py,
tests/unit/test_runs_folders.py)."""

import os
import stat
from rlvr.kit.files import modes_follow_umask


def test_modes_follow_the_umask_and_links_are_left_alone(tmp_path):
    folder = tmp_path / "final"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x")
    (folder / "model.safetensors").chmod(0o600)
    (folder / "config.json").write_text("{}")
    (folder / "config.json").chmod(0o644)
    outside = tmp_path / "secret"
    outside.write_text("private\n")
    outside.chmod(0o600)
    (folder / "link").symlink_to(outside)
    old = os.umask(0o027)
    try:
        modes_follow_umask(folder, "final model")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.lstat().st_mode) for p in folder.iterdir() if not p.is_symlink()}
    assert modes == {"model.safetensors": 0o640, "config.json": 0o640}
    assert stat.S_IMODE(outside.stat().st_mode) == 0o600
