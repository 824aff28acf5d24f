"""A recipe runs only code its user chose (rlvr.host.imports): the checks that run `rlvr` or other
processes end to end (the e2e ring; the others: tests/unit/test_host_imports.py)."""

from __future__ import annotations


import pytest

from helpers import one_line_error, run_rlvr
from helpers.host_imports import recipe, marker_module

STDLIB = ["pty:spawn", "subprocess:run", "builtins:exec", "antigravity:x", "os:system"]


HOSTILE = """\
name: hostile
task:
  name: dataset
  options: {{path: {rows}, columns: [question, answer]}}
prompt: {{template: "{{{{question}}}}", chat_template: false}}
rewards:
  "{reference}": 1.0
model: {{name: smollm2-135m-instruct}}
"""


@pytest.mark.parametrize("reference", STDLIB[:4])
def test_validate_eval_and_train_refuse_the_standard_library_in_one_line_and_run_nothing(reference, tmp_path):
    """The attack as it was: the prompts, passed to pty.spawn (or subprocess.run) as its argv,
    are a command writing a marker file. Refused by every command; the marker never appears."""
    marker = tmp_path / "ran"
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(f'{{"question": "{q}", "answer": "0"}}\n' for q in ["/bin/sh", "-c", f"id > {marker}"] * 4))
    path = tmp_path / "r" / "hostile.yaml"
    path.parent.mkdir()
    path.write_text(HOSTILE.format(rows=rows, reference=reference))
    for args in (["validate", path], ["validate", "--import", "--data", path],
                 ["eval", path, "--output-dir", tmp_path / "out"], ["train", path, "--output-dir", tmp_path / "run"]):
        out = run_rlvr(*args, cwd=tmp_path, timeout=300)
        one_line_error(out, f"reward '{reference}': module '{reference.partition(':')[0]}' is part of Python's "
                       "standard library")
    assert not marker.exists()
    assert not (tmp_path / "out").exists() and not (tmp_path / "run").exists()


def test_validate_names_the_code_and_imports_it_only_when_asked(tmp_path):
    marker = tmp_path / "imported"
    elsewhere = tmp_path / "site"
    module_file = marker_module(elsewhere, "sidefx_cli", marker)
    path = recipe(tmp_path / "r", "sidefx_cli:exact")
    env = {"PYTHONPATH": str(elsewhere)}
    for args in (["validate", path], ["validate", "--import", path], ["eval", path, "--output-dir", tmp_path / "o"]):
        one_line_error(run_rlvr(*args, cwd=tmp_path, env=env), "reward 'sidefx_cli:exact': module 'sidefx_cli'")
    assert not marker.exists()

    # allowed by the flag: validate says what it would import and does not import it
    out = run_rlvr("validate", path, "--allow-module", "sidefx_cli", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert f"reward sidefx_cli:exact imports sidefx_cli from {module_file} (--allow-module); not imported" in out.stdout
    assert not marker.exists()
    # by the environment, and with --import: now it runs
    out = run_rlvr("validate", "--import", path, cwd=tmp_path, env={**env, "RLVR_ALLOW_MODULES": "other,sidefx_cli"})
    assert out.returncode == 0, out.stderr
    assert "(RLVR_ALLOW_MODULES); imported and checked" in out.stdout and marker.exists()


def test_a_module_beside_the_recipe_works_from_any_folder(tmp_path):
    marker = tmp_path / "imported"
    folder = tmp_path / "project"
    module_file = marker_module(folder, "beside_recipe", marker)
    path = recipe(folder, "beside_recipe:exact")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    out = run_rlvr("validate", path, cwd=elsewhere)
    assert out.returncode == 0, out.stderr
    assert f"imports beside_recipe from {module_file} (in the recipe's folder); not imported" in out.stdout
    assert not marker.exists()
    out = run_rlvr("validate", "--import", path, cwd=elsewhere)
    assert out.returncode == 0, out.stderr
    assert "imported and checked" in out.stdout and marker.exists()
