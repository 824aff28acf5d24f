"""Pool files (`rlvr pool`, data.pool_file, data.pool_pass_range) and the data.pool recipe options:
what a recipe keeps from a pool file, and the one-line errors for a file that does not fit."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest

from rlvr import RlvrError
from rlvr.host.registry import load_registry
from rlvr.recipe.pool_file import read_pool_file, select_rows
from rlvr.recipe.resolve import load_rows, resolve
from rlvr.recipe.spec import TaskRef
from rlvr.sampling.prompts import load_prompt_set
from helpers.recipe_pool_file import RATES, load_recipe_text, write_pool, pooled



@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.fixture(scope="module")
def rows(registry):
    return load_rows(registry, TaskRef(name="arithmetic", options={"size": 12}), "train")


# ---------------------------------------------------------------------------- the recipe options
def test_pool_options_and_their_shorthand(tmp_path):
    recipe = load_recipe_text(tmp_path, "data: {pool: true}\n", ["data.pool.retire_after=3"])
    assert recipe.data.pool.enabled and recipe.data.pool.retire_after == 3 and recipe.data.pool.revisit_after == 2
    off = load_recipe_text(tmp_path, "")
    assert not off.data.pool.enabled and off.data.pool_file is None and off.data.pool.pass_threshold is None
    never = load_recipe_text(tmp_path, "data: {pool: {enabled: true, revisit_after: null, pass_threshold: 0.5}}\n")
    assert never.data.pool.revisit_after is None and never.data.pool.pass_threshold == 0.5


@pytest.mark.parametrize("extra, message", [
    ("data: {pool: {enabled: true, retire_after: 0}}", "data.pool.retire_after: Input should be greater than or equal to 1"),
    ("data: {pool: {revisit_after: 0}}", "data.pool.revisit_after"),
    ("data: {pool: {window: 8}}", "data.pool.window: unknown setting"),
    ("data: {pool: {enabled: maybe}}", "data.pool.enabled"),
    ("data: {pool_pass_range: [0.1, 0.9]}", "data: pool_pass_range needs pool_file"),
    ("data: {pool_file: p.jsonl, pool_pass_range: [0.9, 0.1]}", "want 0 <= lo <= hi <= 1"),
    ("data: {pool_file: p.jsonl, pool_pass_range: [0, 1.5]}", "want 0 <= lo <= hi <= 1"),
    ("data: {pool_file: p.jsonl, pool_pass_range: [0.5]}", "data.pool_pass_range"),
    ("data: {pool_file: ''}", "give a file written by `rlvr pool`"),
])
def test_bad_pool_options_are_refused_in_one_line(tmp_path, extra, message):
    with pytest.raises(RlvrError, match=message.replace("[", r"\[").replace("(", r"\(")) as caught:
        load_recipe_text(tmp_path, extra + "\n")
    assert "\n" not in str(caught.value)


def test_the_default_range_keeps_prompts_neither_always_nor_never_solved(tmp_path, rows, registry):
    recipe = pooled(tmp_path, rows)
    resolve(recipe, registry)  # the file is checked with the recipe, before any row or model loads
    assert select_rows(recipe, rows) == [i for i, r in enumerate(RATES) if 0 < r < 1] == [1, 3, 5, 7, 8, 11]


@pytest.mark.parametrize("span, kept", [
    ("[0.5, 1.0]", [2, 3, 5, 6, 8, 10]),  # inclusive at both ends
    ("[0.0, 0.0]", [0, 4, 9]),  # only the never solved
    ("[0.3, 0.6]", [3, 8]),
])
def test_an_explicit_pass_range_is_inclusive(tmp_path, rows, span, kept):
    assert select_rows(pooled(tmp_path, rows, f", pool_pass_range: {span}"), rows) == kept


def test_rows_without_ids_are_matched_by_index(tmp_path, rows):
    recipe = pooled(tmp_path, rows, ids=False)
    assert all(r["id"] is None for r in read_pool_file(recipe.data.pool_file))
    assert select_rows(recipe, rows) == [1, 3, 5, 7, 8, 11]
    with pytest.raises(RlvrError, match=r"2 of the 12 prompts .* are not among the 10 train rows, e\.g\. 10"):
        select_rows(recipe, rows[:10])


class Tokenizer:  # characters as token ids: enough to render prompts
    chat_template = None

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(map(chr, ids))


def test_the_train_set_loads_only_the_selected_rows(tmp_path, rows, registry):
    recipe = pooled(tmp_path, rows, ", max_prompt_tokens: 15")
    longest = max(len(rows[i]["question"]) for i in (1, 3, 5, 7, 8, 11))
    recipe.data.max_prompt_tokens = longest - 1  # the longest selected prompts are dropped after selection
    train = load_prompt_set(recipe, registry, Tokenizer(), split="train")
    expected = [i for i in (1, 3, 5, 7, 8, 11) if len(rows[i]["question"]) < longest]
    assert train.positions == expected and [r["id"] for r in train.rows] == [rows[i]["id"] for i in expected]
    assert train.dropped == 6 - len(expected) > 0
    test = load_prompt_set(recipe, registry, Tokenizer(), split="eval")  # the eval split is never filtered
    assert test.dropped + len(test.rows) == 12 and test.positions == sorted(test.positions)


def test_a_question_shown_as_a_worked_example_is_neither_trained_nor_evaluated(tmp_path, rows, registry):
    # the shot's answer is in the prompt: RL on that row learns to copy it into every answer
    shot = "  " + rows[3]["question"].replace(" ", "  ") + "\n"  # the same words, other spacing
    extra = f"data: {{pool_file: {write_pool(tmp_path / 'pool.jsonl', rows)}}}\n"
    recipe = load_recipe_text(tmp_path, extra, [f"prompt.shots=[{{user: {json.dumps(shot)}, assistant: '#### 1'}}]"])
    train = load_prompt_set(recipe, registry, Tokenizer(), split="train")
    assert train.positions == [1, 5, 7, 8, 11] and [r["id"] for r in train.rows] == [rows[i]["id"] for i in (1, 5, 7, 8, 11)]
    assert all(rows[3]["question"] not in p.text.split("#### 1")[-1] for p in train.prompts)
    recipe.data.pool_file = None
    every = load_prompt_set(recipe, registry, Tokenizer(), split="train")
    assert every.positions == [i for i in range(12) if i != 3] and len(every.rows) == 11
    recipe.prompt.shots = []  # without the shot, the row is back
    assert load_prompt_set(recipe, registry, Tokenizer(), split="train").positions == list(range(12))
    test_recipe_rows = load_rows(registry, TaskRef(name="arithmetic", options={"size": 12}), "test")
    only = load_recipe_text(tmp_path, "", [f"prompt.shots=[{{user: {json.dumps(test_recipe_rows[0]['question'])}, assistant: x}}]"])
    test = load_prompt_set(only, registry, Tokenizer(), split="eval")
    assert len(test.rows) == len(test_recipe_rows) - 1 and test_recipe_rows[0]["id"] not in [r["id"] for r in test.rows]
    lone = load_recipe_text(tmp_path, "", ["data.train_limit=1", f"prompt.shots=[{{user: {json.dumps(rows[0]['question'])}, assistant: x}}]"])
    with pytest.raises(RlvrError, match="every prompt is one of prompt.shots"):
        load_prompt_set(lone, registry, Tokenizer(), split="train")


BAD_FILES = {
    "missing": (None, "not found (write one with `rlvr pool RECIPE --output FILE`)"),
    "empty": ("\n\n", "lists no prompts"),
    "not-json": ('{"task": "arithmetic"\n', "line 1: not JSON"),
    "not-an-object": ("[1, 2]\n", "line 1: not a JSON object"),
    "no-task": ('{"split": "train", "index": 0, "pass_rate": 0.5}\n', "needs 'task' and 'split'"),
    "rate-over-1": ('{"task": "arithmetic", "split": "train", "index": 0, "pass_rate": 1.5}\n', "'pass_rate' must be"),
    "rate-a-string": ('{"task": "arithmetic", "split": "train", "index": 0, "pass_rate": "0.5"}\n', "'pass_rate' must be"),
    "negative-index": ('{"task": "arithmetic", "split": "train", "index": -1, "pass_rate": 0.5}\n', "'index' must be"),
    "bool-id": ('{"task": "arithmetic", "split": "train", "index": 0, "id": true, "pass_rate": 0.5}\n', "'id' must be"),
    "twice": ('{"task": "arithmetic", "split": "train", "index": 0, "id": "a", "pass_rate": 0.5}\n'
              '{"task": "arithmetic", "split": "train", "index": 1, "id": "a", "pass_rate": 0.5}\n',
              "line 2: id 'a' is listed twice"),
}


@pytest.mark.parametrize("text, message", BAD_FILES.values(), ids=BAD_FILES.keys())
def test_a_malformed_pool_file_is_refused_in_one_line(tmp_path, registry, text, message):
    path = tmp_path / "pool.jsonl"
    if text is not None:
        path.write_text(text)
    recipe = load_recipe_text(tmp_path, f"data: {{pool_file: {path}}}\n")
    with pytest.raises(RlvrError, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
        resolve(recipe, registry)
    assert "\n" not in str(caught.value) and "data.pool_file" in str(caught.value)


def test_a_pool_file_of_other_data_is_refused(tmp_path, rows, registry):
    with pytest.raises(RlvrError, match="measured task 'gsm8k' split 'train', but the recipe trains on task "
                                        "'arithmetic' split 'train'"):
        resolve(pooled(tmp_path, rows, task="gsm8k"), registry)
    with pytest.raises(RlvrError, match="measured task 'arithmetic' split 'test'"):
        resolve(pooled(tmp_path, rows, split="test"), registry)
    other = [{**row, "id": row["id"].replace("train", "elsewhere")} for row in rows]
    recipe = pooled(tmp_path, other)
    resolve(recipe, registry)  # the ids are only known once the rows load
    with pytest.raises(RlvrError, match=r"12 of the 12 prompts .* e\.g\. 'arithmetic/elsewhere/0': was it measured "
                                        "on another task"):
        select_rows(recipe, rows)


def test_an_empty_selection_is_refused_saying_what_the_file_holds(tmp_path, rows, registry):
    recipe = pooled(tmp_path, rows, rates=[0.0, 1.0] * 6)
    with pytest.raises(RlvrError, match=r"none of the 12 prompts .* has a pass rate in \(0.0, 1.0\) "
                                        r"\(data.pool_pass_range unset\): 6 never passed, 6 always passed"):
        resolve(recipe, registry)


def test_a_relative_pool_file_is_read_from_the_recipes_folder(tmp_path, rows, monkeypatch):
    """As the dataset task's path: from the recipe's folder wherever the command runs (it was read
    from the current folder), from the current one for a recipe given as data, and a file found
    only in the current folder is refused with both places named."""
    folder = tmp_path / "recipes"
    folder.mkdir()
    write_pool(folder / "pool.jsonl", rows)
    monkeypatch.chdir(tmp_path)
    registry = load_registry()
    registry.use_recipe(folder / "r.yaml")
    recipe = load_recipe_text(folder, "data: {pool_file: pool.jsonl}\n")
    resolve(recipe, registry)
    assert recipe.data.pool_file == str(folder / "pool.jsonl") and select_rows(recipe, rows) == [1, 3, 5, 7, 8, 11]
    write_pool(tmp_path / "mine.jsonl", rows)
    with pytest.raises(RlvrError, match=r"^data.pool_file: mine.jsonl is read from the recipe's folder, where there "
                                        r"is no recipes/mine.jsonl; the current folder's mine.jsonl is not read"):
        resolve(load_recipe_text(folder, "data: {pool_file: mine.jsonl}\n"), registry)
    as_data = load_recipe_text(folder, "data: {pool_file: mine.jsonl}\n")
    resolve(as_data, load_registry())  # no recipe file: the current folder
    assert as_data.data.pool_file == str(tmp_path / "mine.jsonl")
    # given on the command line (`rlvr pool ... --output mine.jsonl`, then `--set data.pool_file=mine.jsonl`):
    # the current folder, as any path on a command line
    given = load_recipe_text(folder, "", overrides=["data.pool_file=mine.jsonl"])
    resolve(given, registry)
    assert given.data.pool_file == str(tmp_path / "mine.jsonl")

# ---------------------------------------------------------------------------- writing a pool file
def test_build_pool_measures_the_train_split_as_training_samples_it(tmp_path, rows, monkeypatch):
    import rlvr.evaluation.evaluate as evaluate
    from rlvr.sampling.prompts import PromptSet

    recipe = load_recipe_text(tmp_path, "data: {train_limit: 12}\neval: {k: [1], temperature: 0.0, max_tokens: 99}\n")
    measured = evaluate.pool_recipe(recipe, k=None, limit=5)
    assert (measured.eval_task.name, measured.eval_split, measured.eval_prompt) == ("arithmetic", "train", recipe.prompt)
    assert (measured.eval.k, measured.eval.temperature, measured.eval_tokens, measured.eval.limit) == ([4], 0.7, 24, 5)
    assert evaluate.pool_recipe(recipe, k=8).eval.k == [8] and evaluate.pool_recipe(recipe).eval.limit == 12

    kept = [0, 2, 3, 7]  # places in the split of the prompts that fit (the others dropped)
    seen = {}

    @contextmanager
    def fake(rec, registry, select=None):
        assert select is None  # all of it measured
        seen["recipe"] = rec

        def measure(part, keep_samples, label):
            assert label == "pool" and not keep_samples  # its progress lines say "pool: ..."
            per_prompt = [{"index": j, "passed": [j % 2 == 0, j > 1, False, True]} for j in range(4)]
            return {"samples_per_prompt": 4, "temperature": 0.7}, per_prompt
        yield PromptSet([rows[i] for i in kept], [None] * 4, 2, kept), measure

    monkeypatch.setattr(evaluate, "_own_sampler", fake)
    summary = evaluate.build_pool(recipe, None, tmp_path / "out" / "pool.jsonl", limit=8)
    assert seen["recipe"].eval.limit == 8
    records = read_pool_file(tmp_path / "out" / "pool.jsonl")
    assert [(r["index"], r["id"], r["passed"], r["pass_rate"]) for r in records] == [
        (0, rows[0]["id"], 2, 0.5), (2, rows[2]["id"], 1, 0.25), (3, rows[3]["id"], 3, 0.75), (7, rows[7]["id"], 2, 0.5)]
    assert all((r["task"], r["split"], r["n"]) == ("arithmetic", "train", 4) for r in records)
    assert summary == {"prompts": 4, "samples_per_prompt": 4, "temperature": 0.7, "never_passed": 0,
                       "always_passed": 0, "learnable": 4, "mean_pass_rate": 0.5, "dropped_overlong_prompts": 2}


def _fake_sampler(rows, kept, calls, fail_at=None):
    """A stand-in for loading the model into a sampler: the prompts of ``rows`` at places
    ``kept`` (the others dropped as overlong), narrowed by ``select`` as the real one narrows
    them; ``calls`` gets the places each measurement was given (an empty list when nothing was
    left, and no sampler). Row i passes 1 of 4 samples when i is even, 3 when odd; the
    ``fail_at``-th measurement (from 1) raises, as a Ctrl-C would stop it."""
    from rlvr.sampling.prompts import PromptSet

    @contextmanager
    def fake(rec, registry, select=None):
        prompts = PromptSet([rows[i] for i in kept], [None] * len(kept), max(kept) + 1 - len(kept), list(kept))
        if select is not None:
            prompts = select(prompts)
        if not prompts.rows:
            calls.append([])
            yield prompts, None
            return

        def measure(part, keep_samples, label):
            calls.append([part.position(i) for i in range(len(part.rows))])
            if len(calls) == fail_at:
                raise KeyboardInterrupt
            per_prompt = [{"index": j, "passed": [True, part.position(j) % 2 == 1, part.position(j) % 2 == 1, False]}
                          for j in range(len(part.rows))]
            return {"samples_per_prompt": 4, "temperature": 0.7}, per_prompt
        yield prompts, measure
    return fake


@pytest.mark.parametrize("ids", [True, False])
def test_extend_measures_only_the_prompts_the_pool_does_not_list(tmp_path, rows, monkeypatch, ids):
    import rlvr.evaluation.evaluate as evaluate

    recipe = load_recipe_text(tmp_path, "")
    output = tmp_path / "pool.jsonl"
    write_pool(output, rows[:4], rates=[0.0, 0.25, 1.0, 0.5], ids=ids)  # places 0-3, measured before
    calls = []
    monkeypatch.setattr(evaluate, "_own_sampler", _fake_sampler(rows, [0, 1, 2, 3, 5, 6, 8], calls))
    summary = evaluate.build_pool(recipe, None, output, limit=9, extend=True)
    assert calls == [[5, 6, 8]]  # 4 and 7 did not fit; 0-3 were measured before
    records = read_pool_file(output)
    assert [(r["index"], r["pass_rate"]) for r in records] == [
        (0, 0.0), (1, 0.25), (2, 1.0), (3, 0.5), (5, 0.75), (6, 0.25), (8, 0.25)]
    assert [r["id"] for r in records] == ([rows[i]["id"] for i in (0, 1, 2, 3)] if ids else [None] * 4) + [
        rows[i]["id"] for i in (5, 6, 8)]
    assert summary == {"prompts": 7, "samples_per_prompt": 4, "temperature": 0.7, "never_passed": 1,
                       "always_passed": 1, "learnable": 5, "mean_pass_rate": 3.0 / 7, "measured_now": 3,
                       "kept": 4, "dropped_overlong_prompts": 2}

    # all of it measured: no model loads, and the file is left as it was
    before = output.read_bytes(), output.stat().st_mtime_ns
    again = evaluate.build_pool(recipe, None, output, limit=9, extend=True)
    assert calls[-1] == [] and (output.read_bytes(), output.stat().st_mtime_ns) == before
    assert (again["measured_now"], again["kept"], again["prompts"], again["temperature"]) == (0, 7, 7, 0.7)


def test_a_pool_is_saved_part_by_part_and_extend_goes_on_after_an_interruption(tmp_path, rows, monkeypatch):
    import rlvr.evaluation.evaluate as evaluate

    recipe = load_recipe_text(tmp_path, "")
    monkeypatch.setattr(evaluate, "POOL_SAVE_SAMPLES", 12)  # 3 prompts a part at 4 samples
    output, calls = tmp_path / "pool.jsonl", []
    monkeypatch.setattr(evaluate, "_own_sampler", _fake_sampler(rows, list(range(10)), calls, fail_at=3))
    with pytest.raises(KeyboardInterrupt):
        evaluate.build_pool(recipe, None, output, limit=10)
    assert calls == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert [r["index"] for r in read_pool_file(output)] == [0, 1, 2, 3, 4, 5]  # the two parts done
    calls.clear()
    summary = evaluate.build_pool(recipe, None, output, limit=10, extend=True)
    assert calls == [[6, 7, 8], [9]] and (summary["measured_now"], summary["kept"]) == (4, 6)
    records = read_pool_file(output)
    assert [(r["index"], r["pass_rate"]) for r in records] == [(i, 0.75 if i % 2 else 0.25) for i in range(10)]

    # a file that was there, without --extend: replaced only by the whole pool
    before = output.read_bytes()
    calls.clear()
    monkeypatch.setattr(evaluate, "_own_sampler", _fake_sampler(rows, [0, 1, 2, 3], calls, fail_at=2))
    with pytest.raises(KeyboardInterrupt):
        evaluate.build_pool(recipe, None, output, limit=4)
    assert calls == [[0, 1, 2], [3]] and output.read_bytes() == before


def test_extend_starts_a_pool_that_does_not_exist_and_without_it_the_file_is_replaced(tmp_path, rows, monkeypatch):
    import rlvr.evaluation.evaluate as evaluate

    recipe = load_recipe_text(tmp_path, "")
    calls = []
    monkeypatch.setattr(evaluate, "_own_sampler", _fake_sampler(rows, [0, 1, 2], calls))
    summary = evaluate.build_pool(recipe, None, tmp_path / "new.jsonl", limit=3, extend=True)
    assert calls == [[0, 1, 2]] and (summary["measured_now"], summary["kept"]) == (3, 0)
    write_pool(tmp_path / "old.jsonl", rows[:2], rates=[0.0, 0.0])
    evaluate.build_pool(recipe, None, tmp_path / "old.jsonl", limit=3)
    assert [r["pass_rate"] for r in read_pool_file(tmp_path / "old.jsonl")] == [0.25, 0.75, 0.25]


@pytest.mark.parametrize("change, message", [
    (dict(k=8), "with 4 samples a prompt, but this measures task 'arithmetic' split 'train' with 8: give the same"),
    (dict(task="gsm8k"), "measured task 'gsm8k' split 'train'"),
    (dict(split="test"), "split 'test' with 4 samples"),
    (dict(text="not json\n"), "--extend: .* line 1: not JSON"),
    (dict(folder=True), "must be a pool file"),
])
def test_extend_refuses_a_pool_measured_otherwise_before_any_model_loads(tmp_path, rows, monkeypatch, change, message):
    import rlvr.evaluation.evaluate as evaluate

    recipe = load_recipe_text(tmp_path, "")
    output = tmp_path / "pool.jsonl"
    if change.get("folder"):
        output.mkdir()
    elif "text" in change:
        output.write_text(change["text"])
    else:
        write_pool(output, rows[:3], rates=[0.0, 0.5, 1.0], task=change.get("task", "arithmetic"),
                   split=change.get("split", "train"))
    before = None if output.is_dir() else output.read_bytes()
    monkeypatch.setattr(evaluate, "_own_sampler", lambda *a, **kw: pytest.fail("the model loaded"))
    with pytest.raises(RlvrError, match=message) as caught:
        evaluate.build_pool(recipe, None, output, k=change.get("k"), limit=6, extend=True)
    assert "\n" not in str(caught.value) and "--extend" in str(caught.value)
    assert before is None or output.read_bytes() == before
