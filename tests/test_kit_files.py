"""Files rlvr writes by a user-given name never follow a planted link (rlvr.kit.files).

The attack: user ``nobody`` plants a symlink in a sticky shared folder (``/tmp``) pointing at a
file only root can reach; root's ``rlvr score --output /tmp/link`` must not replace that file.
The kernel's ``protected_symlinks`` is off here, so these tests also hold where it is on."""

import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers import RLVR, one_line_error, run_rlvr
from rlvr import RlvrError
from rlvr.kit import open_append, open_folder, replacing, write_replacing
from rlvr.runs.outputs import open_output

ROOT = Path(__file__).resolve().parents[1]
NOBODY, OTHER = 65534, 65533  # the planter, and a second unprivileged user

needs_root = pytest.mark.expected_skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                         reason="planting a link as another user needs root (and setpriv)")


def as_user(uid, *command, **kw):
    """Run ``command`` as ``uid`` (its own group, no others)."""
    return subprocess.run(command, user=uid, group=uid, extra_groups=[], capture_output=True, text=True, **kw)


@pytest.fixture
def scene():
    """A world-readable base (pytest's tmp_path is root's 0700) holding a sticky 1777 ``shared``
    folder and ``input.jsonl``; removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="rlvr-links-"))
    base.chmod(0o755)
    (base / "shared").mkdir()
    (base / "shared").chmod(0o1777)
    (base / "input.jsonl").write_text(json.dumps({"completion": "<think>a</think> \\boxed{1}"}) + "\n")
    (base / "input.jsonl").chmod(0o644)
    yield base
    shutil.rmtree(base)


def private_file(base: Path, owner: int) -> Path:
    """``base/private/secret``: mode 0600 in a 0700 folder, both ``owner``'s."""
    folder = base / f"private-{owner}"
    folder.mkdir(mode=0o700)
    secret = folder / "secret"
    secret.write_text("only the owner may change this\n")
    secret.chmod(0o600)
    os.chown(folder, owner, owner)
    os.chown(secret, owner, owner)
    return secret


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


def test_a_link_is_refused_whoever_made_it(tmp_path):
    target = tmp_path / "target.jsonl"
    target.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target.name)
    for write in (lambda: write_replacing(link, "new\n", "--output"),
                  lambda: os.close(open_append(link, "--log-file"))):
        with pytest.raises(RlvrError, match="is a symlink: rlvr never writes through a link"):
            write()
    with pytest.raises(RlvrError, match="is a symlink"), open_output(link) as f:
        f.write("new\n")
    assert target.read_text() == "old\n" and os.readlink(link) == target.name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.jsonl", "target.jsonl"]


def test_ones_own_folder_links_are_followed(tmp_path):
    """A link to a folder, in a folder that is not shared (or owned by this user), is followed as
    the kernel would: ``runs -> /big/disk/runs`` keeps working."""
    (tmp_path / "real").mkdir()
    (tmp_path / "runs").symlink_to("real")
    write_replacing(tmp_path / "runs" / "sub" / "a.json", "{}")
    assert (tmp_path / "real" / "sub" / "a.json").read_text() == "{}"
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / "mine").symlink_to(tmp_path / "real")  # made by this user: followed
    with open(open_append(shared / "mine" / "log", "log"), "a") as f:
        f.write("line\n")
    assert (tmp_path / "real" / "log").read_text() == "line\n"


def test_a_folder_swapped_for_a_link_mid_write_cannot_redirect_it(tmp_path):
    """The rename happens in the folder opened at the start, whatever its name points to later."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "out.json").write_text("must stay\n")
    folder = tmp_path / "out"
    folder.mkdir()
    with replacing(folder / "out.json", "--output") as fd:
        os.write(fd, b"new\n")
        folder.rename(tmp_path / "moved")
        folder.symlink_to(elsewhere)
    assert (tmp_path / "moved" / "out.json").read_text() == "new\n"
    assert (elsewhere / "out.json").read_text() == "must stay\n"
    assert sorted(p.name for p in (tmp_path / "moved").iterdir()) == ["out.json"]


def test_replacing_keeps_the_old_file_on_failure_and_its_mode_on_success(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old\n")
    path.chmod(0o640)
    with pytest.raises(ValueError), replacing(path, "--output") as fd:
        os.write(fd, b"half")
        raise ValueError("boom")
    assert path.read_text() == "old\n"
    write_replacing(path, "new\n")
    assert path.read_text() == "new\n" and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    with pytest.raises(RlvrError, match="is a folder"):
        write_replacing(tmp_path, "x", "--output")
    (tmp_path / "afile").write_text("keep\n")
    with pytest.raises(RlvrError, match="afile is a file, not a folder"):
        write_replacing(tmp_path / "afile" / "x.json", "x", "--output")
