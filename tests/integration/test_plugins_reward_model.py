"""The ``reward_model`` reward on tiny random-init sequence classifiers saved into tmp folders:
its numbers against a plain transformers forward pass of the same text, batching, the heads'
outputs, truncation, normalisation and clipping, the scorer left untouched, the worker-process
placement, refusals of what is no scorer, per-record failures, and the reward runner and
``rlvr score`` end to end."""

from __future__ import annotations

import functools
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

from rlvr import RlvrError
from rlvr_plugins import reward_model as rm
from rlvr_plugins.reward_model import scorer as rs
import re


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """This module's tests run on one torch thread; the modules after it get back the count they had."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


CPU = {"placement": "inline", "device": "cpu", "dtype": "float32"}
PROMPTS = ["What is 2 + 3?",
           [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}],
           "Write one word.", "Say something long, please, about the weather in spring and the rain."]
COMPLETIONS = ["5", "Blue, or maybe green if you ask me twice.", "Word.", "It rains and rains and then the sun comes."]


def save_scorer(folder, tokenizer_path, *, num_labels=1, id2label=None, chat_template=True, seed=0):
    """A 2-layer Llama sequence classifier with SmolLM2's tokenizer (its pad token is the config's
    pad_token_id), its score head scaled up so that its logits are of order 1."""
    tok = AutoTokenizer.from_pretrained(tokenizer_path)
    if not chat_template:
        tok.chat_template = None
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                      num_labels=num_labels, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, **({"id2label": id2label} if id2label else {}))
    torch.manual_seed(seed)
    model = LlamaForSequenceClassification(cfg)
    with torch.no_grad():
        model.score.weight.mul_(10.0)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    assert (tokenizer_of(str(folder)).chat_template is None) is not chat_template
    return str(folder)


@pytest.fixture(scope="module")
def scorer(smollm_path, tmp_path_factory):
    return save_scorer(tmp_path_factory.mktemp("scorer"), smollm_path)


@pytest.fixture(scope="module")
def pair_scorer(smollm_path, tmp_path_factory):
    return save_scorer(tmp_path_factory.mktemp("pair-scorer"), smollm_path, num_labels=2,
                       id2label={0: "rejected", 1: "chosen"}, seed=1)


@pytest.fixture(autouse=True)
def fresh_state():
    yield
    rm.close()  # no scorer, worker or running statistics leaks into the next test


def messages(prompt):
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt


@functools.cache
def tokenizer_of(folder):
    return AutoTokenizer.from_pretrained(folder)


@functools.cache
def classifier_of(folder):
    return AutoModelForSequenceClassification.from_pretrained(folder)


def oracle_ids(folder, prompt, completion):
    """The token ids the reward must score, made here with plain transformers."""
    tok = tokenizer_of(folder)
    if tok.chat_template is not None:
        conversation = [*messages(prompt), {"role": "assistant", "content": completion}]
        text = tok.apply_chat_template(conversation, tokenize=False)
        return tok(text, add_special_tokens=False)["input_ids"]
    prompt_text = prompt if isinstance(prompt, str) else "\n\n".join(m["content"] for m in prompt) + "\n\n"
    return tok(prompt_text + completion)["input_ids"]


def oracle_logits(folder, ids):
    with torch.no_grad():
        return classifier_of(folder)(torch.tensor([ids])).logits[0].tolist()


def values(scores):
    return [s.value for s in scores]


def test_a_score_is_the_logit_of_a_plain_forward_pass_of_the_chat_formatted_pair(scorer):
    scores = rm.reward_model(PROMPTS, COMPLETIONS, model=scorer, **CPU)
    expected = [oracle_logits(scorer, oracle_ids(scorer, p, c))[0] for p, c in zip(PROMPTS, COMPLETIONS)]
    assert values(scores) == pytest.approx(expected, abs=1e-5)
    assert len({round(v, 3) for v in expected}) == len(expected)  # the pairs do score differently
    assert all(s.info["output"] == "logit" and s.info["tokens"] > 0 for s in scores)
    # a chat completion (TRL's conversational form) is its text; the same call gives the same numbers
    chat = [[{"role": "assistant", "content": c}] for c in COMPLETIONS]
    assert values(rm.reward_model(PROMPTS, chat, model=scorer, **CPU)) == values(scores)


def test_batches_give_the_numbers_of_one_pair_at_a_time(scorer):
    prompts = PROMPTS * 2
    completions = COMPLETIONS + [c + " And more words to make it longer." for c in COMPLETIONS]
    # Rows of different lengths share each batch: padding the model reads as text (pads that
    # are not its pad_token_id, or not masked) would change the shorter rows' scores.
    assert len({len(oracle_ids(scorer, p, c)) for p, c in zip(prompts, completions)}) == len(prompts)
    alone = values(rm.reward_model(prompts, completions, model=scorer, batch_size=1, **CPU))
    batched = values(rm.reward_model(prompts, completions, model=scorer, batch_size=8, **CPU))
    in_threes = values(rm.reward_model(prompts, completions, model=scorer, batch_size=3, **CPU))
    assert batched == pytest.approx(alone, abs=1e-5)
    assert in_threes == pytest.approx(alone, abs=1e-5)


def test_without_a_chat_template_the_text_is_the_prompt_then_the_completion(smollm_path, tmp_path):
    plain = save_scorer(tmp_path / "plain", smollm_path, chat_template=False)
    scores = rm.reward_model(PROMPTS, COMPLETIONS, model=plain, **CPU)
    expected = [oracle_logits(plain, oracle_ids(plain, p, c))[0] for p, c in zip(PROMPTS, COMPLETIONS)]
    assert values(scores) == pytest.approx(expected, abs=1e-5)
    assert tokenizer_of(plain).decode(oracle_ids(plain, PROMPTS[0], COMPLETIONS[0])) == "What is 2 + 3?5"


def test_a_two_label_head_gives_the_probability_or_log_odds_of_its_positive_label(pair_scorer, scorer):
    logits = [oracle_logits(pair_scorer, oracle_ids(pair_scorer, p, c)) for p, c in zip(PROMPTS, COMPLETIONS)]
    chosen = [float(torch.softmax(torch.tensor(l), -1)[1]) for l in logits]
    scores = rm.reward_model(PROMPTS, COMPLETIONS, model=pair_scorer, **CPU)
    assert values(scores) == pytest.approx(chosen, abs=1e-5)
    assert scores[0].info["label"] == "chosen" and scores[0].info["output"] == "probability"
    by_name = rm.reward_model(PROMPTS, COMPLETIONS, model=pair_scorer, positive_label="rejected", **CPU)
    assert values(by_name) == pytest.approx([1 - p for p in chosen], abs=1e-5)
    by_index = rm.reward_model(PROMPTS, COMPLETIONS, model=pair_scorer, positive_label=0, **CPU)
    assert values(by_index) == values(by_name)
    log_odds = rm.reward_model(PROMPTS, COMPLETIONS, model=pair_scorer, output="logit", **CPU)
    assert values(log_odds) == pytest.approx([l[1] - l[0] for l in logits], abs=1e-5)
    with pytest.raises(RlvrError, match=r"positive_label 'good' is not a label of the scorer \(0: rejected, 1: chosen"):
        rm.reward_model(PROMPTS, COMPLETIONS, model=pair_scorer, positive_label="good", **CPU)
    with pytest.raises(RlvrError, match="positive_label 2 is not a label"):
        rm.reward_model(PROMPTS, COMPLETIONS, model=pair_scorer, positive_label=2, **CPU)
    # a single logit's probability is its sigmoid
    raw = values(rm.reward_model(PROMPTS, COMPLETIONS, model=scorer, **CPU))
    sig = values(rm.reward_model(PROMPTS, COMPLETIONS, model=scorer, output="probability", **CPU))
    assert sig == pytest.approx([1 / (1 + math.exp(-x)) for x in raw], abs=1e-7)


def test_a_long_prompt_is_cut_from_its_left_and_the_completion_is_never_cut(scorer):
    tok = tokenizer_of(scorer)
    words = " ".join(f"w{i}" for i in range(200))
    completion = "The final answer."
    bare = len(oracle_ids(scorer, "", completion))  # the template and the completion alone
    limit = bare + 20
    full = rs.load_scorer(scorer, "cpu", "float32")
    ids, cut = full.encode(([{"role": "system", "content": "ZEBRA rules."}, {"role": "user", "content": words}], True),
                           completion, limit)
    text = tok.decode(ids)
    assert len(ids) <= limit and cut > 0
    assert text.endswith(tok.decode(oracle_ids(scorer, "x", completion)).split("<|im_start|>assistant")[-1])
    assert "w199" in text and "w0 " not in text and "ZEBRA" not in text  # the earliest turn went first
    (score,) = rm.reward_model([words], [completion], model=scorer, max_length=limit, **CPU)
    kept, _ = full.encode(([{"role": "user", "content": words}], False), completion, limit)
    assert score.value == pytest.approx(oracle_logits(scorer, kept)[0], abs=1e-5)
    assert score.info["prompt_tokens_cut"] > 0 and score.info["tokens"] <= limit
    long, short = rm.reward_model(["Hi", "Hi"], [words, completion], model=scorer, max_length=limit, **CPU)
    assert long.value is None and long.info["why"].startswith("the completion alone takes")
    assert short.value == pytest.approx(oracle_logits(scorer, oracle_ids(scorer, "Hi", completion))[0], abs=1e-5)


def test_normalised_scores_use_every_score_seen_and_clipping_comes_after(scorer):
    first = rm.reward_model(PROMPTS[:2], COMPLETIONS[:2], model=scorer, normalize="running", warmup=3, **CPU)
    second = rm.reward_model(PROMPTS[2:], COMPLETIONS[2:], model=scorer, normalize="running", warmup=3, **CPU)
    raw = values(rm.reward_model(PROMPTS, COMPLETIONS, model=scorer, **CPU))
    assert [s.info["raw"] for s in first + second] == pytest.approx(raw, abs=1e-5)
    assert values(first) == pytest.approx([x - np.mean(raw[:2]) for x in raw[:2]], abs=1e-6)  # 2 < warmup
    assert values(second) == pytest.approx([(x - np.mean(raw)) / np.std(raw) for x in raw[2:]], abs=1e-5)
    assert second[0].info["seen"] == 4
    rm.close()
    clipped = rm.reward_model(PROMPTS, COMPLETIONS, model=scorer, normalize="running", warmup=1, clip=(-0.5, 0.5),
                              **CPU)
    z = [(x - np.mean(raw)) / np.std(raw) for x in raw]
    assert values(clipped) == pytest.approx(np.clip(z, -0.5, 0.5).tolist(), abs=1e-5)
    assert [s.info.get("clipped", False) for s in clipped] == [abs(v) > 0.5 for v in z]
    assert any(abs(v) > 0.5 for v in z) and any(abs(v) < 0.5 for v in z)
    capped = rm.reward_model(PROMPTS, COMPLETIONS, model=scorer, clip=(-math.inf, 0.0), **CPU)
    assert values(capped) == pytest.approx([min(x, 0.0) for x in raw], abs=1e-6)


def test_the_scorer_is_never_trained_by_scoring(scorer):
    loaded = rs.load_scorer(scorer, "cpu", "float32")
    assert rs.load_scorer(scorer, "cpu", "float32") is loaded  # once per process and (model, device, dtype)
    model = loaded.model
    assert not model.training
    assert all(not p.requires_grad for p in model.parameters())
    rm.reward_model(PROMPTS, COMPLETIONS, model=scorer, **CPU)
    assert all(p.grad is None for p in model.parameters())
    saved = load_file(f"{scorer}/model.safetensors")
    state = model.state_dict()
    assert saved and all(torch.equal(state[k], v) for k, v in saved.items())


def test_what_is_no_scorer_is_refused_in_one_line_before_any_weights_load(tiny_model, tmp_path, monkeypatch):
    from rlvr.host.registry import load_registry

    spec = load_registry().reward("reward_model")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [(str(tmp_path / "nope"), "model folder not found"),
             (str(empty), "no config.json in it"),
             (str(tiny_model), "is a LlamaForCausalLM (a causal LM: it has no score head), not a sequence classifier"),
             ("no-such-alias", "is not a folder, a hub id (org/name) or a pulled rlvr alias")]
    monkeypatch.setattr(AutoModelForSequenceClassification, "from_pretrained",
                        lambda *a, **k: pytest.fail("weights were loaded"))
    for name, message in cases:
        with pytest.raises(RlvrError) as raised:  # when the recipe's options are checked
            spec.check_options({"model": name})
        assert message in str(raised.value) and "\n" not in str(raised.value)
        assert str(raised.value).startswith("reward 'reward_model' option model:")
        with pytest.raises(RlvrError) as raised:  # and when called
            rm.reward_model(["p"], ["c"], model=name, **CPU)
        assert message in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(RlvrError, match="no model given"):
        rm.reward_model(["p"], ["c"], **CPU)
    with pytest.raises(RlvrError, match="option clip: \\[1, -1\\]: the low bound 1 is above the high bound -1"):
        spec.check_options({"clip": [1, -1]})
    with pytest.raises(RlvrError, match="option device: 'gpu0': a device is auto, cpu, cuda or cuda:N"):
        spec.check_options({"device": "gpu0"})


def test_a_classifier_config_over_weights_without_a_score_head_is_refused(tiny_model, tmp_path):
    folder = tmp_path / "relabelled"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["LlamaForSequenceClassification"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(RlvrError, match=r"has no weights for score\.weight: they would be random"):
        rm.reward_model(["p"], ["c"], model=str(folder), **CPU)
    with pytest.raises(RlvrError, match="no weights for score.weight"):  # the failure is kept, not retried
        rs.load_scorer(str(folder), "cpu", "float32")


def test_a_record_that_cannot_be_tokenized_fails_alone(scorer):
    completions = [COMPLETIONS[0], "\ud800 a lone surrogate", COMPLETIONS[2]]
    prompts = PROMPTS[:3]
    scores = rm.reward_model(prompts, completions, model=scorer, batch_size=4, normalize="running", **CPU)
    assert scores[1].value is None and "cannot format or tokenize it" in scores[1].info["why"]
    expected = [oracle_logits(scorer, oracle_ids(scorer, p, c))[0] for p, c in zip(prompts, completions)
                if "\ud800" not in c]
    assert [scores[0].info["raw"], scores[2].info["raw"]] == pytest.approx(expected, abs=1e-5)
    assert scores[0].info["seen"] == 2  # the failed record is no score


def test_the_reward_runner_scores_chat_prompts_through_the_registered_reward(scorer):
    from rlvr.host.registry import load_registry
    from rlvr.rewards.runner import BoundReward, score_batch
    from rlvr.sampling.prompts import Prompt

    reward = BoundReward(load_registry().reward("reward_model"), 2.0, {"model": scorer, **CPU})
    chats = [messages(p) for p in PROMPTS]
    # The policy's rendering of the prompt (its text) is not what the scorer formats: its messages are.
    prompts = [Prompt([], f"<policy's own markup>{m[-1]['content']}", m) for m in chats]
    completions = [*COMPLETIONS, "\ud800"]
    batch = score_batch([reward], [*prompts, prompts[0]], completions, [None] * 5, [{}] * 5)
    expected = [oracle_logits(scorer, oracle_ids(scorer, p, c))[0] for p, c in zip(chats, COMPLETIONS)]
    assert batch.values["reward_model"][:4] == pytest.approx(expected, abs=1e-5)
    assert batch.total[:4] == pytest.approx([2 * x for x in expected], abs=1e-5)
    assert batch.values["reward_model"][4] is None and batch.total[4] is None
    unscored = batch.unscored()
    assert unscored.counts["reward_model"] == 1 and "cannot format or tokenize" in unscored.reasons["reward_model"]


def test_rlvr_score_rates_a_jsonl_file(scorer, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from rlvr.cli.main import cli

    monkeypatch.chdir(tmp_path)
    records = [{"prompt": messages(p), "completion": c} for p, c in zip(PROMPTS, COMPLETIONS)]
    records.append({"prompt": "Plain text", "completion": [{"role": "assistant", "content": "A chat answer."}]})
    Path("in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    args = ["score", "--reward", "reward_model", "--input", "in.jsonl", "--output", "out.jsonl",
            "--option", "placement=inline", "--option", "device=cpu"]
    out = CliRunner().invoke(cli, [*args, "--option", f"model={scorer}"])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in Path("out.jsonl").read_text().splitlines()]
    expected = [oracle_logits(scorer, oracle_ids(scorer, p, c))[0] for p, c in zip(PROMPTS, COMPLETIONS)]
    expected.append(oracle_logits(scorer, oracle_ids(scorer, "Plain text", "A chat answer."))[0])
    assert [r["reward"] for r in rows] == pytest.approx(expected, abs=1e-5)
    assert rows[0]["reward_info"] == {"output": "logit", "tokens": len(oracle_ids(scorer, *records[0].values()))}
    assert "scored 5/5 records with 'reward_model'" in out.output
    refused = CliRunner().invoke(cli, [*args, "--option", "model=./no-such-folder"])
    assert refused.exit_code == 2 and refused.output.strip().splitlines() == [
        "rlvr: error: reward 'reward_model' option model: './no-such-folder': model folder not found: ./no-such-folder"]


def test_the_recipe_in_the_docs_validates_and_a_policy_as_its_scorer_does_not(tiny_model, tmp_path):
    """docs/rewards.md's reward_model recipe, checked as `rlvr validate` checks it (its hub id is
    checked when fetched), then with a causal LM's folder as its model."""
    from helpers.docs import check_recipe, recipe_blocks
    from rlvr.host.registry import load_registry

    registry = load_registry()
    (recipe,) = [r for r in recipe_blocks(ROOT / "docs" / "rewards.md") if re.search(r"^  reward_model:", r, re.M)]
    check_recipe(recipe, registry, tmp_path)
    policy = re.sub(r"model: \S+", f"model: {tiny_model}", recipe)
    with pytest.raises(RlvrError, match="option model: .* is a LlamaForCausalLM .* not a sequence classifier"):
        check_recipe(policy, registry, tmp_path, "policy")


def test_the_process_placement_gives_the_inline_numbers(scorer, pair_scorer, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the worker's torch, on this busy machine
    inline = values(rm.reward_model(PROMPTS, COMPLETIONS, model=scorer, batch_size=2, **CPU))
    options = {**CPU, "placement": "process"}
    bad = "\ud800 a lone surrogate"
    scores = rm.reward_model([*PROMPTS, "x"], [*COMPLETIONS, bad], model=scorer, batch_size=2, **options)
    assert values(scores[:-1]) == pytest.approx(inline, abs=1e-6)
    assert scores[-1].value is None and "cannot format or tokenize" in scores[-1].info["why"]
    with pytest.raises(RlvrError, match="positive_label 3 is not a label") as raised:
        rm.reward_model(PROMPTS, COMPLETIONS, model=scorer, positive_label=3, **options)
    assert "\n" not in str(raised.value)
    # One batch of 32 records of ~300 tokens: far more than a millisecond's work for any CPU
    # (four short records took under one on an AMX Xeon, and the test failed).
    n, long = 32, "rain and sun " * 100
    slow = rm.reward_model(PROMPTS[:1] * n, [long] * n, model=scorer, batch_size=n, timeout=0.001, **options)
    assert all(s.value is None and "took over 0.001 s" in s.info["why"] for s in slow)
