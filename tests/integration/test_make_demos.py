"""`make demo` and `make tool-demo` run again: each run goes to a fresh folder and says where the
earlier ones stay; OUT and ARGS reach `rlvr train` (the Makefile, with a stand-in venv whose `rlvr`
prints its arguments)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import ROOT


@pytest.fixture
def stand_in(tmp_path):
    """A copy of the Makefile beside a venv that is installed already and whose rlvr echoes."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("rlvr", '#!/bin/sh\necho rlvr "$@"\n'), ("python", "#!/bin/sh\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "venv" / ".rlvr-installed").touch()
    return tmp_path


def make(folder: Path, *args: str) -> tuple[list[str], str]:
    done = subprocess.run(["make", "-s", *args, "VENV=venv"], cwd=folder, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if " train " in line], done.stdout


@pytest.mark.parametrize("target, recipe, name", [("demo", "tasks/demo.yaml", "demo"),
                                                  ("tool-demo", "tasks/tool_demo.yaml", "tool_demo")])
def test_a_demo_run_again_goes_to_a_fresh_folder(stand_in, target, recipe, name):
    assert make(stand_in, target)[0] == [f"rlvr train {recipe} --output-dir runs/{name}"]
    for again in (2, 3):
        (stand_in / "runs" / (name if again == 2 else f"{name}-2")).mkdir(parents=True)  # what the last run left
        trains, out = make(stand_in, target)
        assert trains == [f"rlvr train {recipe} --output-dir runs/{name}-{again}"]
        assert f"make {target}: earlier runs stay in runs/{name}*; this one goes to runs/{name}-{again}" in out
    trains, _ = make(stand_in, target, "OUT=runs/" + name, "ARGS=--resume")
    assert trains == [f"rlvr train {recipe} --output-dir runs/{name} --resume"]
