"""A LoRA run's final/ is an adapter folder: what `--model FOLDER` accepts of one, what it
refuses in one line before anything loads, and where its merged copy lives. The merge itself
and the training that writes the folder: tests/e2e/test_training_engine.py::test_lora_with_gradient_checkpointing."""

from __future__ import annotations

import json
import os

import pytest

from rlvr import RlvrError
from helpers.adapter_folders import adapter, model_folder


def test_an_adapter_folder_names_its_base_by_rlvrs_note_else_by_peft(tmp_path):
    from rlvr.models.adapters import adapter_base, is_adapter_folder

    both = adapter(tmp_path / "a", base="qwen2.5-coder-0.5b-instruct", peft_base="/elsewhere/cache/qwen")
    assert is_adapter_folder(both) and adapter_base(both) == "qwen2.5-coder-0.5b-instruct"
    peft_only = adapter(tmp_path / "b", base=None, peft_base="Qwen/Qwen2.5-0.5B")
    assert adapter_base(peft_only) == "Qwen/Qwen2.5-0.5B"
    neither = adapter(tmp_path / "c", base=None)
    with pytest.raises(RlvrError, match=r"adapter folder .*c: neither rlvr_adapter.json nor adapter_config.json "
                                        "names its base model"):
        adapter_base(neither)
    (neither / "rlvr_adapter.json").write_text("[1, 2]")
    with pytest.raises(RlvrError, match="rlvr_adapter.json is not a JSON object"):
        adapter_base(neither)
    assert not is_adapter_folder(model_folder(tmp_path / "whole"))


@pytest.mark.parametrize("case, message", [
    ("pickled", r"holds pickled weights \(adapter_model.bin\); rlvr loads safetensors only"),
    ("no weights", "no adapter_model.safetensors in it"),
    ("itself", "names itself as its base model"),
    ("alias cut short", r"unknown model 'smollm2-135m': did you mean the alias 'smollm2-135m-instruct'"),
    ("base missing", "model folder not found: /no/such/base"),
])
def test_an_adapter_folder_rlvr_would_not_load_is_refused_in_one_line(tmp_path, case, message):
    from rlvr.models.hub import check_model_name

    folder = tmp_path / "final"
    bases = {"itself": str(folder), "alias cut short": "smollm2-135m", "base missing": "/no/such/base"}
    base = bases.get(case, "org/m")
    adapter(folder, base=base, weights=case not in ("pickled", "no weights"))
    if case == "pickled":
        (folder / "adapter_model.bin").write_bytes(b"not loaded")
    with pytest.raises(RlvrError, match=message):
        check_model_name(str(folder))


def test_a_good_adapter_folder_passes_and_its_hub_base_must_be_at_hand(tmp_path, monkeypatch):
    from rlvr.kit import data
    from rlvr.models import hub

    monkeypatch.setattr(hub, "in_hub_cache", lambda name: False)
    monkeypatch.setattr(data, "hub_reachable", lambda timeout=3.0: False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    on_hub = adapter(tmp_path / "hub", base="org/m")
    hub.check_model_name(str(on_hub))  # a name check asks nothing of the network
    with pytest.raises(RlvrError, match="^model 'org/m': the hub cannot be reached"):
        hub.check_model_at_hand(str(on_hub))
    local = adapter(tmp_path / "local", base=str(model_folder(tmp_path / "base")))
    hub.check_model_name(str(local))
    hub.check_model_at_hand(str(local))


def test_the_note_names_a_folder_base_by_its_absolute_path(tmp_path, monkeypatch):
    from rlvr.models.adapters import base_name

    model_folder(tmp_path / "base")
    monkeypatch.chdir(tmp_path)
    assert base_name("base") == str(tmp_path / "base")
    assert base_name("smollm2-135m-instruct") == "smollm2-135m-instruct" and base_name("org/m") == "org/m"


def test_the_most_recently_used_merged_copies_are_kept(tmp_path):
    from rlvr.models.adapters import KEEP_MERGED, _forget_old_copies

    for n in range(KEEP_MERGED + 2):
        (tmp_path / f"copy{n}").mkdir()
        os.utime(tmp_path / f"copy{n}", (1000 + n, 1000 + n))
    (tmp_path / "being-written.partial").mkdir()
    _forget_old_copies(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["being-written.partial"] + [
        f"copy{n}" for n in range(2, KEEP_MERGED + 2)]


def test_a_finished_lora_run_without_checkpoints_names_its_adapter_to_start_from(tmp_path):
    from rlvr.training.checkpoint import check_output_dir

    adapter(tmp_path / "final")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(RlvrError, match=f"start from it with --model {tmp_path / 'final'}"):
        check_output_dir(tmp_path, resume=False)


def test_a_chain_of_adapters_is_followed_to_its_model_and_a_loop_is_one_line(tmp_path, monkeypatch):
    """An adapter trained on a LoRA run's final/ names that folder as its base: the chain is
    checked to the model at its end; folders that name each other in a loop are refused."""
    from rlvr.kit import data
    from rlvr.models import hub

    first = adapter(tmp_path / "first", base="org/m")
    second = adapter(tmp_path / "second", base=str(first))
    hub.check_model_name(str(second))
    monkeypatch.setattr(hub, "in_hub_cache", lambda name: False)
    monkeypatch.setattr(data, "hub_reachable", lambda timeout=3.0: False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(RlvrError, match="^model 'org/m': the hub cannot be reached"):
        hub.check_model_at_hand(str(second))
    (first / "rlvr_adapter.json").write_text(json.dumps({"base": str(second)}))
    for check in (hub.check_model_name, hub.check_model_at_hand):
        with pytest.raises(RlvrError, match=r"adapter folder .*second: its base models form a loop \(.*second -> "
                                            r".*first -> .*second\)"):
            check(str(second))
