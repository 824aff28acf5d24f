"""The reasoning-gym bridge's own tests: `pytest examples/rlvr-reasoning-gym`."""

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from rlvr import RlvrError
from rlvr.host.registry import get_plugin_manager, load_registry
from rlvr_reasoning_gym import dumps_entry, find_answer, loads_entry, reasoning_gym_reward, reasoning_gym_task

HERE = Path(__file__).resolve().parents[1]
RLVR = str(Path(sys.executable).parent / "rlvr")


def rlvr(*args, cwd=None):
    return subprocess.run([RLVR, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300)


def rows(split, **options):
    return list(reasoning_gym_task(split, data_dir=None, **options))


def score(completions, entries, **options):
    n = len(completions)
    options.setdefault("workers", 1)  # one shared checker process for the whole module
    return reasoning_gym_reward([""] * n, completions, [None] * n, entry=entries, **options)


def test_rlvr_discovers_the_task_and_reward():
    registry = load_registry(get_plugin_manager())
    assert registry.task("reasoning_gym").plugin == "reasoning_gym"
    assert registry.task("reasoning_gym").splits == ("train", "test")
    assert registry.reward("reasoning_gym").columns == ("entry",)
    assert registry.reward("reasoning_gym").options["extract"] == "answer_tag"
    out = rlvr("tasks")
    assert out.returncode == 0, out.stderr
    assert any(line.startswith("reasoning_gym") for line in out.stdout.splitlines())


@pytest.mark.parametrize(
    "options, said",
    [
        ({"extract": "answer_tags"}, "extract: 'answer_tags' is not one of answer_tag, boxed, last_number, raw "
                                     "(did you mean 'answer_tag'?)"),
        ({"timeout": 0}, "timeout: 0 is not a number > 0"),
        ({"max_answer_chars": 0}, "max_answer_chars: 0 is not an integer >= 1"),
        ({"workers": -1}, "workers: -1 is not an integer >= 0"),
        ({"partial_credit": "no"}, "partial_credit: 'no' is not true or false"),
    ],
)
def test_reward_options_are_checked_before_scoring(options, said):
    spec = load_registry(get_plugin_manager()).reward("reasoning_gym")
    with pytest.raises(RlvrError) as err:
        spec.check_options(options)
    assert str(err.value) == f"reward 'reasoning_gym' option {said}"
    assert spec.check_options(spec.options) == spec.options


def test_listing_plugins_does_not_import_reasoning_gym():
    code = (
        "import sys\n"
        "from rlvr.cli.main import cli\n"
        "for args in (['plugins', '--json'], ['tasks'], ['rewards']):\n"
        "    try:\n"
        "        cli(args, standalone_mode=False)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = [m for m in ('reasoning_gym', 'matplotlib', 'sympy', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("dataset", ["gsm_symbolic", "basic_arithmetic", "leg_counting"])
def test_rows_have_the_columns_and_are_deterministic(dataset):
    train = rows("train", dataset=dataset, size=20, seed=3)
    assert train == rows("train", dataset=dataset, size=20, seed=3)
    assert len(train) == 20
    for row in train:
        assert set(row) == {"id", "question", "answer", "entry", "dataset"}
        assert row["id"].startswith(f"reasoning_gym/{dataset}/train/")
        assert row["dataset"] == dataset
        assert isinstance(row["answer"], str) and row["answer"]
        entry = loads_entry(row["entry"])
        assert entry["question"] == row["question"] and str(entry["answer"]) == row["answer"]
        assert entry["metadata"]["source_dataset"] == dataset
        assert entry["rlvr"] == {"dataset": dataset, "config": {}}
    assert rows("train", dataset=dataset, size=20, seed=4) != train


def test_config_reaches_the_generator():
    train = rows("train", dataset="chain_sum", size=10, config={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1})
    for row in train:
        numbers = [t for t in row["question"].split(":")[-1].replace("=", " ").split() if t.lstrip("-").isdigit()]
        assert len(numbers) == 2 and all(len(n.lstrip("-")) == 1 for n in numbers), row["question"]
    assert loads_entry(train[0]["entry"])["rlvr"]["config"]["max_terms"] == 2


def test_splits_are_disjoint_even_where_questions_repeat():
    # One-digit sums of two terms: few distinct questions, so repeats across seeds are certain.
    options = dict(dataset="basic_arithmetic", size=200, config={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1})
    train, test = rows("train", **options), rows("test", **options)
    train_q = {r["question"] for r in train}
    assert len(train_q) < len(train)  # the space really is small
    assert test and all(r["question"] not in train_q for r in test)
    assert len({r["question"] for r in test}) == len(test)  # no repeats inside test either
    assert {r["id"] for r in train}.isdisjoint({r["id"] for r in test})
    # dedup: false keeps every test item (disjoint seeds, but repeats by chance remain)
    assert len(rows("test", dedup=False, **options)) == 200


def test_big_space_keeps_the_whole_test_split():
    train, test = rows("train", dataset="gsm_symbolic", size=50), rows("test", dataset="gsm_symbolic", size=50)
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert len(test) >= 48


def test_weighted_mix_of_datasets():
    mix = rows("train", size=60, datasets=[
        {"name": "chain_sum", "weight": 1, "config": {"max_terms": 3}},
        {"name": "leg_counting", "weight": 1},
    ])
    sources = {r["dataset"] for r in mix}
    assert sources == {"chain_sum", "leg_counting"}
    chain = next(r for r in mix if r["dataset"] == "chain_sum")
    assert loads_entry(chain["entry"])["rlvr"] == {"dataset": "chain_sum", "config": {"max_terms": 3}}
    assert rows("train", size=60, datasets={"chain_sum": 1, "leg_counting": 1})  # mapping form
    entries = [r["entry"] for r in mix[:6]]
    assert [s.value for s in score([f"<answer>{r['answer']}</answer>" for r in mix[:6]], entries)] == [1.0] * 6


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(dataset="gsm_symbolc"), "unknown reasoning-gym dataset 'gsm_symbolc' (did you mean 'gsm_symbolic'?)"),
        (dict(dataset="nonsense_xyz"), "unknown reasoning-gym dataset 'nonsense_xyz'; "),
        (dict(), "set option dataset"),
        (dict(dataset="chain_sum", config={"max_term": 3}), "no config key 'max_term' (did you mean 'max_terms'?)"),
        (dict(dataset="chain_sum", config={"seed": 3}), "set seed as a task option"),
        (dict(dataset="chain_sum", config={"min_terms": 0}), "invalid config for 'chain_sum'"),
        (dict(dataset="chain_sum", size=0), "size must be between 1"),
        (dict(dataset="chain_sum", datasets={"leg_counting": 1}), "not both"),
        (dict(datasets={"chain_sum": 1, "leg_countng": 1}), "did you mean 'leg_counting'"),
        (dict(datasets={"chain_sum": -1}), "must be a positive number"),
    ],
)
def test_bad_options_are_one_line_errors(options, message):
    with pytest.raises(RlvrError) as err:
        reasoning_gym_task("train", data_dir=None, **options)  # raised at the call, not the first row
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_reward_gold_scores_one_wrong_scores_zero_with_info():
    train = rows("train", dataset="gsm_symbolic", size=4)
    entries = [r["entry"] for r in train]
    gold = [r["answer"] for r in train]
    got = score(
        [f"Let me think.\n<answer>{gold[0]}</answer>", f"<answer> {gold[1]} </answer>", "<answer>-1</answer>", "I give up"],
        entries,
        partial_credit=False,
    )
    assert [s.value for s in got] == [1.0, 1.0, 0.0, 0.0]
    assert got[0].info == {"answer": gold[0], "gold": gold[0], "dataset": "gsm_symbolic", "why": "correct", "score": 1.0}
    assert got[2].info["answer"] == "-1" and got[2].info["score"] == 0.01 and "partial credit" in got[2].info["why"]
    assert got[3].info["answer"] is None and "no <answer>" in got[3].info["why"]
    # reasoning-gym's own partial credit is kept by default
    assert score(["<answer>-1</answer>"], entries[2:3])[0].value == 0.01


def test_reward_extract_modes_and_chat_completions():
    train = rows("train", dataset="basic_arithmetic", size=2)
    entries, gold = [r["entry"] for r in train], train[0]["answer"]
    assert score([f"so \\boxed{{{gold}}}"], entries[:1], extract="boxed")[0].value == 1.0
    assert score([f"the result is {gold}"], entries[:1], extract="last_number")[0].value == 1.0
    assert score([f"  {gold}\n"], entries[:1], extract="raw")[0].value == 1.0
    chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": f"<answer>{gold}</answer>"}]
    assert score([chat], entries[:1])[0].value == 1.0
    # an answer inside <think> does not count once the think block is closed
    assert score([f"<think><answer>{gold}</answer></think> no idea"], entries[:1])[0].value == 0.0
    with pytest.raises(RlvrError, match="extract must be one of"):
        score(["x"], entries[:1], extract="tag")


def test_find_answer():
    assert find_answer("a <answer>1</answer> b <ANSWER> 2 </answer>") == "2"
    assert find_answer("<answer></answer>") is None
    assert find_answer("<answer>3") is None


def test_reward_never_raises_for_bad_input():
    good = rows("train", dataset="chain_sum", size=1)[0]["entry"]
    foreign = json.dumps({"question": "q", "answer": "1", "metadata": {"source_dataset": "no_such"}})
    got = score(
        ["<answer>1</answer>"] * 5 + [None, 12345, "<answer>" + "9" * 20000 + "</answer>"],
        [None, "{not json", "[1, 2]", foreign, json.dumps({"question": "q"}), good, good, good],
    )
    assert [s.value for s in got[:5]] == [None] * 5
    assert all(s.info["why"] for s in got)
    assert "unknown reasoning-gym dataset 'no_such'" in got[3].info["why"]
    assert [s.value for s in got[5:]] == [0.0, 0.0, 0.0]
    assert "longer than" in got[7].info["why"]


def test_entries_keep_tuples_fractions_and_int_keys():
    entry = {"question": "q", "answer": None, "metadata": {
        "board": ((1, 2), (3, 4)), "frac": Fraction(3, 4), "colors": {0: "red", 1: "blue"},
        "tags": {"x"}, "odd": {"__tuple__": 1}, "plain": [1, "a", None, 1.5, True],
    }}
    assert loads_entry(dumps_entry(entry)) == entry
    assert type(loads_entry(dumps_entry(entry))["metadata"]["board"][0]) is tuple


def test_arc_boards_survive_the_round_trip():
    # rearc compares the answer board with a tuple of tuples in its metadata: plain JSON loses that
    train = rows("train", dataset="rearc", size=1)
    assert score([f"<answer>{train[0]['answer']}</answer>"], [train[0]["entry"]])[0].value == 1.0


def write_recipe(path, dataset_line):
    path.write_text(
        "task:\n  name: reasoning_gym\n  options: {" + dataset_line + ", size: 20}\n"
        'prompt: {template: "{{question}}"}\n'
        "rewards: {reasoning_gym: 1.0}\n"
        "sampling: {num_generations: 2}\n"
        "trainer: {rollout_batch_size: 4, micro_batch_size: 2}\n"
    )
    return path


@pytest.mark.parametrize(
    "line, message",
    [
        ("dataset: gsm_symbolc", "did you mean 'gsm_symbolic'?"),
        ("dataset: chain_sum, config: {max_term: 3}", "no config key 'max_term'"),
    ],
)
def test_cli_bad_dataset_exits_2_with_one_line(tmp_path, line, message):
    recipe = write_recipe(tmp_path / "bad.yaml", line)
    out = rlvr("validate", "--data", recipe)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_cli_validates_the_example_recipes():
    recipes = [HERE / "gsm_symbolic.yaml", HERE / "mix.yaml"]
    out = rlvr("validate", "--data", *recipes)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count(": ok") == 2
    out = rlvr("validate", "--data", "--profile", "cpu", HERE / "gsm_symbolic.yaml")
    assert out.returncode == 0, out.stderr


def test_cli_score_round_trip(tmp_path):
    train = rows("train", dataset="leg_counting", size=3)
    records = [
        {"id": 1, "completion": f"<answer>{train[0]['answer']}</answer>", "entry": train[0]["entry"]},
        {"id": 2, "completion": "<answer>-7</answer>", "entry": train[1]["entry"]},
        {"id": 3, "completion": "<answer>1</answer>", "entry": "{broken"},
    ]
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = rlvr("score", "--reward", "reasoning_gym", "--input", src, "--output", dst, "--workers", "1",
               "--option", "partial_credit=false")
    assert out.returncode == 0, out.stderr
    got = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [r["id"] for r in got] == [1, 2, 3]
    assert [r["reward"] for r in got] == [1.0, 0.0, None]
    assert got[0]["reward_info"]["why"] == "correct" and got[1]["reward_info"]["answer"] == "-7"
