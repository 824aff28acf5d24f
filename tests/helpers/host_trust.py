"""What tests/e2e/test_host_trust_runs.py, tests/unit/test_host_trust.py share."""

from __future__ import annotations

from pathlib import Path


TOOLS_RECIPE = """\
name: trust
task: {{name: dataset, options: {{path: {rows}, columns: [question, answer]}}}}
prompt: {{template: "{{{{question}}}}"}}
rewards: {{environment: 1.0}}
environment: {{name: tools, tools: [{tools}], options: {options}}}
model: {{name: smollm2-135m-instruct}}
"""


def write_recipe(folder: Path, tools: str, options: str = "{}", text: str = TOOLS_RECIPE) -> Path:
    rows = folder / "rows.jsonl"
    rows.write_text('{"question": "Call the tool.", "answer": "1"}\n' * 4)
    path = folder / "recipe.yaml"
    path.write_text(text.format(rows=rows, tools=tools, options=options))
    return path
