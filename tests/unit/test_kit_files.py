"""Files rlvr writes by a user-given name never follow a planted link (rlvr.kit.files).

The attack: user ``nobody`` plants a symlink in a sticky shared folder (``/tmp``) pointing at a
file only root can reach; root's ``rlvr score --output /tmp/link`` must not replace that file.
The kernel's ``protected_symlinks`` is off here, so these tests also hold where it is on."""

import os
import stat

import pytest

from rlvr import RlvrError
from rlvr.kit import open_append, replacing, write_replacing
from rlvr.runs.outputs import open_output


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
