"""Hostile files a user may be handed: each is refused in one line (exit 2) and does no harm.

A YAML alias bomb (1 KB, 9^9 values once expanded), JSON nested past Python's stack in any JSON
file rlvr reads, a model folder whose weights are a pickle that runs a command, and a sampler
secret in a file other users can read.
"""

from __future__ import annotations

import json
import time

import pytest

from rlvr import RlvrError
from rlvr.recipe.load import MAX_EXPANDED_NODES, load_recipe, load_yaml
from helpers.cli_untrusted_input import alias_bomb, pickled_model_folder

DEEP_JSON = "[" * 100_000 + "]" * 100_000


# ------------------------------------------------------------------ YAML


def test_an_alias_bomb_is_refused_before_anything_walks_it(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("name: bomb\n" + alias_bomb())
    assert len(bomb.read_bytes()) < 1024
    start = time.monotonic()
    with pytest.raises(RlvrError, match=r"bomb.yaml: line \d+: malformed YAML: its aliases expand to more than "
                       f"{MAX_EXPANDED_NODES:,} values"):
        load_recipe(bomb)
    assert time.monotonic() - start < 5  # it took over 300 s in _first_non_finite
    with pytest.raises(Exception, match="alias bomb"):  # --set values are read by the same loader
        load_yaml(alias_bomb())


def test_one_big_string_named_by_many_aliases_is_refused_before_anything_reads_it(tmp_path):
    """Under the node limit but 1 MB x 100 aliases: 100 MB for every prompt rendered with it
    (`validate --data` took 100 s and 1.6 GB); refused by its expanded characters, at once."""
    from rlvr.recipe.load import MAX_EXPANDED_CHARS

    big = tmp_path / "big.yaml"
    big.write_text("name: big\nx: &x " + "a" * (1 << 20) + "\nprompt: {system: [" + ", ".join(["*x"] * 100) + "]}\n")
    start = time.monotonic()
    with pytest.raises(RlvrError, match=f"its aliases expand to more than {MAX_EXPANDED_CHARS:,} characters"):
        load_recipe(big)
    assert time.monotonic() - start < 10
    assert len(load_yaml("x: &x " + "a" * 1000 + "\ny: [" + ", ".join(["*x"] * 100) + "]\n")["y"]) == 100


def test_aliases_within_the_limit_still_load(tmp_path):
    data = load_yaml(alias_bomb(levels=4) + "base: &base {lr: 1.0e-5}\nprofile: {<<: *base, steps: 3}\n")
    assert len(data["d"]) == 9 and data["d"][0][0][0] == ["lol"] * 9
    assert data["profile"] == {"lr": 1e-5, "steps": 3}


@pytest.mark.parametrize("text, message", [
    ("a: &x [1, *x]\n", "an alias refers to a node that contains it"),
    ("a: " + "[" * 50_000 + "]" * 50_000 + "\n", "malformed YAML: nested too deeply"),
])
def test_self_containing_and_deeply_nested_yaml_is_one_line(tmp_path, text, message):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(RlvrError, match=message) as err:
        load_recipe(path)
    assert "\n" not in str(err.value)


def test_every_json_reader_says_one_line_for_json_nested_too_deeply(tmp_path):
    from rlvr.evaluation.compare import read_counts
    from rlvr.kit import read_jsonl
    from rlvr.kit.data import parse_json
    from rlvr.recipe.pool_file import read_pool_file
    from rlvr.runs.metrics import step_rows
    from rlvr.runs.plotting import read_metrics
    from rlvr.sampling.samplers import model_config
    from rlvr.training.checkpoint import read_rank_state
    from rlvr_plugins.tasks import dataset

    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        parse_json(DEEP_JSON)
    deep = tmp_path / "deep.jsonl"
    deep.write_text(DEEP_JSON + "\n")
    (tmp_path / "deep.json").write_text(DEEP_JSON)
    step = tmp_path / "run" / "step3"
    step.mkdir(parents=True)
    (step / "rlvr_rank0.json").write_text(DEEP_JSON)
    evaluation = tmp_path / "eval"
    evaluation.mkdir()
    (evaluation / "samples.jsonl").write_text('{"id": 1, "samples": [{"correct": true}]}\n')
    (evaluation / "report.json").write_text(DEEP_JSON)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(DEEP_JSON)

    refused = {
        "rank state": (lambda: read_rank_state(step, 0), "rlvr_rank0.json is not a valid rank state (nested too deeply"),
        "pool file": (lambda: read_pool_file(deep), "deep.jsonl line 1: not JSON (nested too deeply)"),
        "jsonl": (lambda: list(read_jsonl(deep)), "deep.jsonl:1: not valid JSON (nested too deeply)"),
        "eval report": (lambda: read_counts(evaluation), "report.json: not JSON (nested too deeply"),
        "dataset .json": (lambda: list(dataset("train", data_dir=tmp_path, path=str(tmp_path / "deep.json"))),
                          "deep.json: not a readable JSON file (nested too deeply"),
        "metrics to plot": (lambda: read_metrics(deep), "has no rows with a numeric 'step'"),
    }
    for name, (read, message) in refused.items():
        with pytest.raises(RlvrError) as err:
            read()
        assert message in str(err.value) and "\n" not in str(err.value), (name, str(err.value))
    assert step_rows(deep) == []  # a run's own files: a line it cannot read is left out
    assert model_config(str(model)) == {}


def test_a_model_folder_of_pickled_weights_is_refused_unread(tmp_path):
    from rlvr.models.hub import check_model_name

    folder, marker = pickled_model_folder(tmp_path)
    with pytest.raises(RlvrError, match=r"model folder .*pickled holds pickled weights \(pytorch_model.bin\); rlvr "
                       "loads safetensors only"):
        check_model_name(str(folder))
    assert not marker.exists()
    (folder / "model.safetensors").write_bytes(b"")  # safetensors beside it are what is loaded
    check_model_name(str(folder))


@pytest.mark.parametrize("name, alias", [
    ("smollm2-135m", "smollm2-135m-instruct"), ("SMOLLM2", "smollm2-135m-instruct"),  # an alias cut short
    ("qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct"), ("smollm2-135m-instrcut", "smollm2-135m-instruct"),
    ("SmolLM2-135M-Instruct", "smollm2-135m-instruct"),  # the hub model's name without its org
    ("qwen", "qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct"),
    ("gpt2", ""), ("HuggingFaceTB/SmolLM2-135M-Instruct", ""), ("llama", "")])
def test_a_bare_name_like_an_alias_gets_did_you_mean(name, alias):
    from rlvr.models.hub import alias_like

    assert alias_like(name) == alias.split()


def test_a_hub_id_is_refused_when_this_machine_cannot_have_it_and_only_then(monkeypatch, tmp_path):
    """Not cached and the hub unreachable (or HF_HUB_OFFLINE): one line at once; cached, or the
    hub reachable, passes (the load says the rest), as do aliases and folders; the name's own
    check (validate's) never asks."""
    from rlvr.kit import data
    from rlvr.models import hub

    cached, reachable = set(), [False]
    monkeypatch.setattr(hub, "in_hub_cache", lambda name: name in cached)
    monkeypatch.setattr(data, "hub_reachable", lambda timeout=3.0: reachable[0])
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(RlvrError, match=r"^model 'org/m': the hub cannot be reached and the hub cache does not hold "
                                        r"it \(a model is an alias"):
        hub.check_model_at_hand("org/m")
    with pytest.raises(RlvrError, match="the alias 'smollm2-135m-instruct' is this model, pulled without the hub"):
        hub.check_model_at_hand("HuggingFaceTB/SmolLM2-135M-Instruct")
    hub.check_model_name("org/m")
    hub.check_model_at_hand("smollm2-135m-instruct")
    hub.check_model_at_hand(str(tmp_path))
    cached.add("org/m")
    hub.check_model_at_hand("org/m")
    reachable[0] = True
    hub.check_model_at_hand("org/other")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RlvrError, match="the hub cannot be reached"):
        hub.check_model_at_hand("org/other")


@pytest.mark.parametrize("mode, who", [(0o604, "other users"), (0o640, "its group"), (0o620, "its group"),
                                       (0o644, "its group and other users"), (0o600, None), (0o400, None)])
def test_a_secret_file_others_can_read_is_warned_about(tmp_path, capfd, mode, who):
    from rlvr.sampling.auth import required_secret

    path = tmp_path / "secret"
    path.write_text("s" * 32 + "\n")
    path.chmod(mode)
    assert required_secret("needs a secret", secret_file=path) == "s" * 32
    err = capfd.readouterr().err
    if who is None:
        assert err == ""
    else:
        assert err.count("\n") == 1
        assert f"--secret-file {path} may be read or written by {who} (mode {mode:o})" in err
        assert "chmod 600" in err
