"""A LoRA adapter folder's merged copy as the ranks after rank 0 look for it (the merge itself:
tests/e2e/test_training_engine.py::test_lora_with_gradient_checkpointing)."""

from __future__ import annotations

import pytest

from rlvr import RlvrError
from helpers.adapter_folders import adapter, model_folder


def test_ranks_that_follow_find_the_merged_copy_and_never_make_it(tmp_path, monkeypatch):
    """resolve_model(pull=False), as the ranks after rank 0 call it: the copy rank 0 made, or one line."""
    from rlvr.models.hub import resolve_model

    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path / "cache"))
    folder = adapter(tmp_path / "final", base=str(model_folder(tmp_path / "base")))
    with pytest.raises(RlvrError, match=r"adapter folder .*final: its merged copy .*cache/merged/\w+ is not there"):
        resolve_model(str(folder), pull=False)
    assert not (tmp_path / "cache" / "merged").exists()
