"""What tests/e2e/test_host_imports_runs.py, tests/unit/test_host_imports.py share."""

from __future__ import annotations

import textwrap
from pathlib import Path


RECIPE = """\
name: refs
task:
  name: arithmetic
  options: {{size: 40, max_operand: 20, operations: "+-", terms: 2}}
prompt:
  template: "{{{{question}}}}"
rewards:
  "{reference}": 1.0
model: {{name: smollm2-135m-instruct}}
"""


def recipe(folder: Path, reference: str, name: str = "recipe.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(RECIPE.format(reference=reference))
    return path


def marker_module(folder: Path, name: str, marker: Path) -> Path:
    """A module that writes ``marker`` when imported, with a reward in it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(f'''
        open({str(marker)!r}, "w").write("imported")

        def exact(completions, answer, **kwargs):
            return [float(c == a) for c, a in zip(completions, answer)]
    '''))
    return folder / f"{name}.py"
