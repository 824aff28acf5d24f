"""``rlvr doctor``: the checks that need no process, socket or model (the unit ring; the others:
tests/e2e/test_cli_doctor.py)."""

from __future__ import annotations

import json

import pytest


def test_check_run_finds_what_is_wrong(tmp_path):
    from rlvr.training.smoke import check_run

    assert check_run(tmp_path, 2) == "no metrics.jsonl"
    rows = [{"step": 1, "loss": 0.0, "grad_norm": 1.0}, {"step": 2, "loss": float("nan"), "grad_norm": 1.0}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert check_run(tmp_path, 2) == "step 2: loss is nan"
    rows[1]["loss"] = 0.1
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert check_run(tmp_path, 2) == "no final/ model"
    (tmp_path / "final").mkdir()
    assert check_run(tmp_path, 2) is None
    assert "not 1..3" in check_run(tmp_path, 3)


def test_the_made_tokenizer_round_trips_and_fills_the_vocabulary(tmp_path):
    from rlvr.models.tiny import make_tokenizer

    tok = make_tokenizer(1000)
    assert len(tok) == 1000 and tok.eos_token == "<|endoftext|>" and tok.pad_token_id == tok.eos_token_id
    text = "What is 12 + 30? Put it in \\boxed{}. é"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert all(tok.decode([i]) for i in range(300, 1000, 97))  # fillers decode to text
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(ValueError, match="cannot hold the 256 bytes"):
        make_tokenizer(100)
