"""Files rlvr writes by a user-given name never follow a planted link (rlvr.kit.files): the checks
that run `rlvr` or other processes end to end (the e2e ring; the others:
tests/integration/test_kit_files_live.py, tests/unit/test_kit_files.py)."""

import os
import shutil
from pathlib import Path

import pytest

from helpers import one_line_error, run_rlvr
from rlvr import RlvrError
from rlvr.kit import open_folder
from helpers.kit_files import as_user, private_file

ROOT = Path(__file__).resolve().parents[2]
NOBODY, OTHER = 65534, 65533  # the planter, and a second unprivileged user

needs_root = pytest.mark.expected_skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                         reason="planting a link as another user needs root (and setpriv)")


@needs_root
def test_sampler_refuses_a_planted_log_file_before_loading_anything(scene):
    secret = private_file(scene, 0)
    assert as_user(NOBODY, "ln", "-s", str(secret), str(scene / "shared" / "sampler.log")).returncode == 0
    out = run_rlvr("sampler", ROOT / "tasks" / "demo.yaml", "--port", "18123", "--log-file", "shared/sampler.log",
                   cwd=scene, env={"RLVR_SAMPLER_SECRET": "x" * 32}, timeout=120)
    one_line_error(out, "--log-file shared/sampler.log is a symlink")
    assert secret.read_text() == "only the owner may change this\n"


@needs_root
def test_a_run_folder_another_user_owns_is_refused(scene):
    theirs = scene / "shared" / "run"
    assert as_user(NOBODY, "mkdir", str(theirs)).returncode == 0
    out = run_rlvr("eval", ROOT / "tasks" / "demo.yaml", "--output-dir", theirs, cwd=scene)
    one_line_error(out, f"belongs to uid {NOBODY}: another user could plant links in it")
    with pytest.raises(RlvrError, match="writable by everyone"):
        open_folder(scene / "shared", "--output-dir", private=True)
    os.close(open_folder(scene, "--output-dir", private=True))  # one's own folder is fine
