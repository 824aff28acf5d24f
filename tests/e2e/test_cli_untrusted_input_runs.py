"""Hostile files a user may be handed: the checks that run `rlvr` or other processes end to end (the
e2e ring; the others: tests/unit/test_cli_untrusted_input.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from helpers import one_line_error, run_rlvr
from helpers.cli_untrusted_input import alias_bomb, pickled_model_folder

ROOT = Path(__file__).resolve().parents[2]
DEEP_JSON = "[" * 100_000 + "]" * 100_000


def test_validate_refuses_an_alias_bomb_fast_in_one_line(tmp_path):
    (tmp_path / "bomb.yaml").write_text("name: bomb\n" + alias_bomb())
    start = time.monotonic()
    out = run_rlvr("validate", "bomb.yaml", cwd=tmp_path, timeout=120)
    one_line_error(out, "malformed YAML: its aliases expand to more than")
    assert time.monotonic() - start < 60  # mostly the start of Python; minutes before


def test_validate_refuses_a_deeply_nested_pool_file_in_one_line(tmp_path):
    (tmp_path / "pool.jsonl").write_text(DEEP_JSON + "\n")
    out = run_rlvr("validate", ROOT / "tasks" / "demo.yaml", "--set", f"data.pool_file={tmp_path / 'pool.jsonl'}",
                   cwd=tmp_path)
    one_line_error(out, "pool.jsonl line 1: not JSON (nested too deeply)")


# ------------------------------------------------------------------ pickled model folders


def test_eval_and_train_refuse_a_pickled_model_folder_in_one_line(tmp_path):
    from transformers import AutoModelForCausalLM

    folder, marker = pickled_model_folder(tmp_path)
    for command in ("eval", "train", "validate"):
        out = run_rlvr(command, ROOT / "tasks" / "demo.yaml", *(["--model", folder] if command != "validate" else
                                                                 ["--set", f"model.name={folder}"]), cwd=tmp_path)
        one_line_error(out, f"model folder {folder} holds pickled weights (pytorch_model.bin)")
    # and the loaders themselves never fall back to the pickle
    with pytest.raises(OSError):
        AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True)
    assert not marker.exists()
