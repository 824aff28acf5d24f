"""`rlvr model pull`'s folder in the cache: saved whole, each file with the umask's mode."""

from __future__ import annotations

import os
import stat

import pytest

from rlvr.models.hub import save_model


@pytest.mark.slow  # loads a small transformers model
def test_a_pulled_models_files_all_take_the_umasks_mode(tiny_model, tmp_path):
    """save_pretrained writes model.safetensors 0600 through a temporary file: the pulled model
    was the one file in the cache others could not read, the rest 0644."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(tiny_model), AutoTokenizer.from_pretrained(tiny_model)
    target = tmp_path / "models" / "tiny"
    target.mkdir(parents=True)
    (target / "stale.json").write_text("{}")  # a folder left before is replaced whole
    old = os.umask(0o022)
    try:
        save_model(model, tokenizer, target)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in target.iterdir()}
    assert "model.safetensors" in modes and "config.json" in modes and "stale.json" not in modes
    assert set(modes.values()) == {0o644}, modes
    assert sorted(p.name for p in target.parent.iterdir()) == ["tiny"]  # no .partial left
