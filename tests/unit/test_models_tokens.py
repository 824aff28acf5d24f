"""The special tokens a model never learnt (rlvr.models.tokens.untrained_template_tokens): added
tokens whose embedding row is shared with other added tokens, named by `rlvr validate` for a
multi-turn recipe and logged at a run's start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import save_file

from rlvr.cli.main import cli
from rlvr.models.tokens import shared_rows, untrained_template_tokens

ROOT = Path(__file__).resolve().parents[2]
# ids 4..8 are added tokens; 5, 6 and 8 keep one initial row (6 and 8 only up to rounding)
ADDED = {4: "<|turn|>", 5: "<call>", 6: "</call>", 7: "<think>", 8: "<|unused|>"}
TEMPLATE = "{% for m in messages %}<|turn|>{{ m.content }}<call></call><think>{% endfor %}"


def model_folder(path: Path, *, template: str | None = TEMPLATE, weights: bool = True) -> Path:
    """A folder with what the check reads: tokenizer.json's added tokens, a chat template and a
    10 x 8 embedding whose rows 5, 6 and 8 are one vector."""
    path.mkdir()
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(10, 8, generator=generator)
    blank = torch.randn(8, generator=generator)
    table[5], table[6], table[8] = blank, blank * 1.0001, blank + 1e-5
    (path / "tokenizer.json").write_text(json.dumps({"added_tokens": [
        {"id": i, "content": c, "special": True} for i, c in ADDED.items()]}))
    if template is not None:
        (path / "chat_template.jinja").write_text(template)
    if weights:
        save_file({"model.embed_tokens.weight": table, "lm_head.weight": torch.randn(10, 8)},
                  str(path / "model.safetensors"))
    (path / "config.json").write_text("{}")
    return path


def test_rows_that_are_one_vector_are_shared_and_distinct_rows_are_not():
    rows = torch.tensor([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.99, 0.14]])
    assert shared_rows(rows) == [True, True, False, False]  # cos(rows 2, 3) = 0.990: trained apart
    assert shared_rows(torch.eye(3)) == [False, False, False]
    # rows zeroed at initialisation are one vector too; one zero row alone shares with nothing
    assert shared_rows(torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 2.0]])) == [True, True, False]
    assert shared_rows(torch.tensor([[0.0, 0.0], [1.0, 2.0], [2.0, -1.0]])) == [False, False, False]


def test_the_templates_tokens_that_share_the_unused_row_are_named(tmp_path):
    # <|unused|> shares the row too, but the template never writes it; <think> and <|turn|> learnt theirs
    assert untrained_template_tokens(model_folder(tmp_path / "m")) == ["<call>", "</call>"]


def test_the_template_in_the_tokenizer_config_counts_too(tmp_path):
    folder = model_folder(tmp_path / "m", template=None)
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "<think>{{ x }}</call>"}))
    assert untrained_template_tokens(folder) == ["</call>"]


def test_sharded_weights_are_read_from_the_shard_the_index_names(tmp_path):
    folder = model_folder(tmp_path / "m")
    (folder / "model.safetensors").rename(folder / "model-00002-of-00002.safetensors")
    assert untrained_template_tokens(folder) == []  # no index: nothing says where the embedding is
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "lm_head.weight": "model-00002-of-00002.safetensors",
        "model.embed_tokens.weight": "model-00002-of-00002.safetensors"}}))
    assert untrained_template_tokens(folder) == ["<call>", "</call>"]


@pytest.mark.parametrize("case", ["no weights", "no template", "no folder", "shard outside"])
def test_what_cannot_be_read_without_loading_a_model_names_nothing(tmp_path, case):
    folder = model_folder(tmp_path / "m", weights=case != "no weights", template=None if case == "no template" else TEMPLATE)
    if case == "shard outside":  # an index may not send the reader out of the folder
        (folder / "model.safetensors").rename(tmp_path / "outside.safetensors")
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
            "model.embed_tokens.weight": "../outside.safetensors"}}))
    assert untrained_template_tokens(tmp_path / "absent" if case == "no folder" else folder) == []


def test_a_hub_ids_snapshot_in_the_hub_cache_is_its_folder(tmp_path, monkeypatch):
    import huggingface_hub.constants

    from rlvr.models.hub import local_folder

    snapshot = tmp_path / "hub" / "models--org--tools-model" / "snapshots" / "0123abcd"
    snapshot.parent.mkdir(parents=True)
    model_folder(snapshot)
    (tmp_path / "hub" / "models--org--tools-model" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--tools-model" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert local_folder("org/tools-model") == snapshot
    assert untrained_template_tokens(local_folder("org/tools-model")) == ["<call>", "</call>"]
    assert local_folder("org/not-cached") is None and local_folder("not a repo id!") is None


def test_validate_notes_them_for_a_multi_turn_recipe_only(tmp_path):
    folder = model_folder(tmp_path / "m")
    note = f"note: model {folder} never learnt <call>, </call> of its chat template"
    for recipe, expected in (("tool_calls_demo.yaml", True), ("gsm8k.yaml", False)):
        result = CliRunner().invoke(cli, ["validate", str(ROOT / "tasks" / recipe), "--set", f"model.name={folder}"])
        assert result.exit_code == 0, result.output
        assert (note in result.output) is expected, result.output
