"""Files rlvr writes by a user-given name never follow a planted link (rlvr.kit.files): the checks
that start worker pools or loopback services, or build a tiny model in-process (the integration
ring; the others: tests/e2e/test_kit_files_runs.py, tests/unit/test_kit_files.py)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import RLVR, one_line_error, run_rlvr
from helpers.kit_files import as_user, private_file
NOBODY, OTHER = 65534, 65533  # the planter, and a second unprivileged user

needs_root = pytest.mark.expected_skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                         reason="planting a link as another user needs root (and setpriv)")


def score_as(uid, base: Path, output: str):
    """The real CLI, run in ``base`` as ``uid`` (root runs it directly)."""
    command = [RLVR, "score", "--reward", "format", "--input", "input.jsonl", "--output", output]
    if uid == 0:
        return run_rlvr(*command[1:], cwd=base)
    # The interpreter may live in root's 0700 home: the user keeps only the right to read any
    # file (CAP_DAC_READ_SEARCH), and may write only where that user may.
    caps = "-all,+dac_read_search"
    command = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", f"--inh-caps={caps}",
               f"--ambient-caps={caps}", f"--bounding-set={caps}", *command]
    env = {**os.environ, "HOME": str(base), "RLVR_CACHE_DIR": str(base / "cache")}
    return subprocess.run(command, cwd=base, env=env, capture_output=True, text=True, timeout=300)


@needs_root
@pytest.mark.parametrize("victim, planter", [(0, NOBODY), (NOBODY, OTHER)], ids=["root", "non-root"])
def test_score_refuses_a_link_another_user_planted_in_a_shared_folder(scene, victim, planter):
    secret = private_file(scene, victim)
    before = secret.read_bytes(), secret.stat()
    shared = scene / "shared"
    assert as_user(planter, "ln", "-s", str(secret), str(shared / "out.jsonl")).returncode == 0
    assert as_user(planter, "ln", "-s", str(secret.parent), str(shared / "dir")).returncode == 0
    assert os.lstat(shared / "out.jsonl").st_uid == planter

    one_line_error(score_as(victim, scene, "shared/out.jsonl"), "shared/out.jsonl is a symlink")
    # A link planted as a folder on the way is not followed either (protected_symlinks' rule).
    one_line_error(score_as(victim, scene, "shared/dir/new.jsonl"),
                   f"dir is a symlink that another user (uid {planter}) made in a shared folder")

    after = secret.read_bytes(), secret.stat()
    assert after[0] == before[0] and after[1].st_ino == before[1].st_ino and after[1].st_mode == before[1].st_mode
    assert sorted(p.name for p in secret.parent.iterdir()) == ["secret"]
    assert sorted(p.name for p in shared.iterdir()) == ["dir", "out.jsonl"]  # no temporary left
    assert os.readlink(shared / "out.jsonl") == str(secret)
    # The same user writing a new file in the shared folder still can.
    done = score_as(victim, scene, "shared/mine.jsonl")
    assert done.returncode == 0, done.stderr
    assert os.stat(shared / "mine.jsonl").st_uid == victim
    assert json.loads((shared / "mine.jsonl").read_text())["reward"] == 1.0
