"""docs/hooks.md and the hookspec docstrings, held against the live plugin host so they cannot
drift: the checks that run `rlvr` or other processes end to end (the e2e ring; the others:
tests/unit/test_docs_hooks.py)."""

import re
import subprocess
import sys
import zipfile
from pathlib import Path


from helpers.docs import fenced_blocks

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "hooks.md"


def build_wheel(folder: Path) -> subprocess.CompletedProcess:
    """Build ``folder``'s wheel with this venv's setuptools, offline (as ``pip install
    --no-build-isolation`` would), into ``folder/dist``."""
    code = "from setuptools import build_meta; print(build_meta.build_wheel('dist'))"
    return subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=120)


def test_packaging_pyproject_builds_beside_a_recipes_folder(tmp_path):
    """A plugin package with rlvr_exact/ and recipes/ folders builds from docs/hooks.md's
    pyproject.toml, and its wheel carries the package and the entry point (not the recipes as a package)."""
    source = next(b for b in fenced_blocks(DOCS, "python") if b.startswith("# rlvr_exact/__init__.py"))
    pyproject = next(b for b in fenced_blocks(DOCS, "toml") if b.startswith("# pyproject.toml") and "rlvr_exact" in b)
    (tmp_path / "rlvr_exact").mkdir()
    (tmp_path / "rlvr_exact" / "__init__.py").write_text(source)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "exact.yaml").write_text("name: exact\n")
    (tmp_path / "pyproject.toml").write_text(pyproject)
    built = build_wheel(tmp_path)
    assert built.returncode == 0, built.stderr[-2000:]
    with zipfile.ZipFile(tmp_path / "dist" / built.stdout.strip().splitlines()[-1]) as wheel:
        names = wheel.namelist()
        entry_points = next(wheel.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "rlvr_exact/__init__.py" in names and not any(n.startswith("recipes/") for n in names)
    assert re.search(r"^\[rlvr\]\nexact = rlvr_exact$", entry_points, re.M), entry_points

    # Without naming the package, the same folder is what setuptools stops at: the check above bites.
    (tmp_path / "pyproject.toml").write_text(pyproject.split("[tool.setuptools]")[0])
    assert "Multiple top-level packages" in build_wheel(tmp_path).stderr
