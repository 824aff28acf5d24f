"""Every row checked before any model loads (rlvr.recipe.rows), in `rlvr train`, `eval`, `pool`,
`validate --data` and the Python API, each problem named by the file and line it is on; a
dataset's relative path read from the recipe's folder; plain `rlvr validate` refusing a data file
that does not exist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import rlvr.api
from rlvr import RlvrError
from rlvr.cli.main import cli
from rlvr.host.registry import load_registry
from rlvr.recipe.load import load_recipe
from rlvr.recipe.resolve import load_rows, resolve

ROWS = [{"question": f"What is {a} * {b}?", "answer": str(a * b)} for a in range(1, 21) for b in range(1, 11)]
# a model that cannot load here: a command that reached it would fail another way
NO_MODEL = "nobody/no-such-model"


def write_rows(path: Path, rows, blank_every: int = 0) -> Path:
    """JSONL, with a blank line after every ``blank_every`` rows (blank lines count as lines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, row in enumerate(rows, 1):
        lines.append(json.dumps(row))
        if blank_every and i % blank_every == 0:
            lines.append("")
    path.write_text("\n".join(lines) + "\n")
    return path


def recipe_file(path: Path, rows: str, **extra) -> Path:
    """A recipe at ``path`` whose dataset task reads ``rows`` (as given: relative or not)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "name": "mine", "task": {"name": "dataset", "options": {"path": rows, "columns": ["question", "answer"]}},
        "prompt": {"template": "{{question}}"}, "rewards": {"math": 1.0}, "model": {"name": NO_MODEL},
        "trainer": {"eval_at_start": False, "eval_at_end": False}, **extra}))
    return path


def with_bad_row(bad: dict, at: int = 100) -> list[dict]:
    """ROWS with ``bad`` in the train split (the dataset task holds one row in five out for test)."""
    from rlvr.kit import in_test_split

    assert not in_test_split(bad)
    return ROWS[:at] + [bad] + ROWS[at:]


def rlvr_cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_line(result, message: str) -> None:
    """Status 2 and one line holding ``message``: the CLI's bad-input error."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output


BAD = {"question": "What is 0 * 0?"}  # no answer


@pytest.fixture
def bad_recipe(tmp_path, monkeypatch):
    """A recipe in tmp/recipes naming data/rows.jsonl beside it, whose row on line 111 (100 rows,
    10 blank lines, then the bad one) lacks the answer; the current folder is elsewhere."""
    write_rows(tmp_path / "recipes" / "data" / "rows.jsonl", with_bad_row(BAD), blank_every=10)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return recipe_file(tmp_path / "recipes" / "r.yaml", "data/rows.jsonl")


def test_train_eval_and_pool_refuse_a_row_without_the_answer_before_the_model(bad_recipe, tmp_path):
    where = f"{tmp_path}/recipes/data/rows.jsonl line 111: no column 'answer' (the reward 'math' needs it)"
    one_line(rlvr_cli("train", bad_recipe, "--output-dir", tmp_path / "run"), where)
    one_line(rlvr_cli("pool", bad_recipe, "--output", tmp_path / "pool.jsonl"), where)
    one_line(rlvr_cli("validate", "--data", bad_recipe), where)
    # eval reads the test split: the bad row is in train, so put one in test too
    rows = json.loads(bad_recipe.read_text())
    rows["data"] = {"eval_split": "train"}
    bad_recipe.write_text(json.dumps(rows))
    one_line(rlvr_cli("eval", bad_recipe, "--output-dir", tmp_path / "ev"), where)
    assert not any((tmp_path / name).exists() for name in ("run", "ev", "pool.jsonl"))


def test_the_python_api_refuses_it_too(bad_recipe, tmp_path):
    with pytest.raises(RlvrError, match="rows.jsonl line 111: no column 'answer' \\(the reward 'math' needs it\\)"):
        rlvr.api.train(bad_recipe, output_dir=tmp_path / "run")
    with pytest.raises(RlvrError, match="rows.jsonl line 111: no column 'answer'"):
        rlvr.api.evaluate(bad_recipe, overrides={"data.eval_split": "train"}, output_dir=tmp_path / "ev")
    # rows given from Python name their task, split and place in the split
    recipe = {"name": "py", "task": "sums", "prompt": {"template": "{{question}}"}, "rewards": {"math": 1.0},
              "model": {"name": NO_MODEL}}
    with pytest.raises(RlvrError, match=r"^task 'sums' split 'train' row 3: column 'answer' is null \(the reward"):
        rlvr.api.train(recipe, tasks={"sums": {"train": ROWS[:2] + [{"question": "1?", "answer": None}], "test": ROWS}},
                       output_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists() and not (tmp_path / "ev").exists()


@pytest.mark.parametrize("bad, message", [
    ({"question": None, "answer": "1"}, "column 'question' is null (the prompt's {{question}} shows it)"),
    ({"question": {"text": "What?"}, "answer": "1"}, "prompt field {{question}}: column 'question' is a dict, not text"),
    ({"answer": "1"}, "no column 'question' (the prompt's {{question}} shows it)"),
])
def test_a_prompt_the_row_cannot_render_is_named_by_its_line(bad, message, tmp_path):
    data = write_rows(tmp_path / "rows.jsonl", ROWS[:5] + [bad] + ROWS[5:])  # validate --data reads both splits
    one_line(rlvr_cli("validate", "--data", recipe_file(tmp_path / "r.yaml", str(data))), f"rows.jsonl line 6: {message}")


def test_rows_of_json_and_parquet_files_are_named_by_their_place(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = with_bad_row(BAD, at=7)
    (tmp_path / "d.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    for name in ("d.json", "d.parquet"):
        one_line(rlvr_cli("validate", "--data", recipe_file(tmp_path / "r.yaml", str(tmp_path / name))),
                 f"{name} row 8: ")


def test_plain_validate_refuses_a_data_file_that_is_not_there(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipe = recipe_file(tmp_path / "recipes" / "r.yaml", "data/nope.jsonl")
    one_line(rlvr_cli("validate", recipe), "recipes/r.yaml: task.options.path: no file or folder at "
             "recipes/data/nope.jsonl (a relative path is read from the recipe's folder)")
    # the data beside the current folder, where a relative path used to be read from: named, not read
    write_rows(tmp_path / "data" / "nope.jsonl", ROWS)
    one_line(rlvr_cli("validate", recipe), "task.options.path: data/nope.jsonl is read from the recipe's folder, "
             "where there is no recipes/data/nope.jsonl; the current folder's data/nope.jsonl is not read")
    # a profile that names a missing file is found as well
    profiled = recipe_file(tmp_path / "p.yaml", "data/nope.jsonl",
                           profiles={"other": {"task": {"options": {"path": "data/gone.jsonl"}}}})
    one_line(rlvr_cli("validate", profiled), "p.yaml (profile 'other'): task.options.path: no file or folder at "
             "data/gone.jsonl")


def test_a_relative_path_is_read_from_the_recipes_folder_wherever_the_command_runs(tmp_path, monkeypatch):
    write_rows(tmp_path / "project" / "recipes" / "data" / "rows.jsonl", ROWS)
    recipe = recipe_file(tmp_path / "project" / "recipes" / "r.yaml", "data/rows.jsonl")
    for cwd in (tmp_path, tmp_path / "project", tmp_path / "project" / "recipes"):
        monkeypatch.chdir(cwd)
        out = rlvr_cli("validate", "--data", recipe.relative_to(cwd))
        assert out.exit_code == 0 and "train: " in out.output, out.output
    registry = load_registry()
    registry.use_recipe(recipe)
    rec = load_recipe(recipe)
    resolve(rec, registry)
    assert rec.task.options["path"] == str(recipe.parent / "data" / "rows.jsonl")
    assert len(load_rows(registry, rec.task, "train")) + len(load_rows(registry, rec.task, "test")) == len(ROWS)
    # a recipe given as data has no folder: its paths are read from the current one
    from rlvr.recipe.rows import check_rows

    monkeypatch.chdir(tmp_path / "project" / "recipes")
    as_data = json.loads(recipe.read_text())
    rec, registry = rlvr.api.python.prepare(as_data, None, None, None, None)
    assert rec.task.options["path"] == str(tmp_path / "project" / "recipes" / "data" / "rows.jsonl")
    assert check_rows(rec, registry)[0].startswith("train: ")


def test_the_place_of_a_row_is_no_column():
    """What the dataset task's rows carry about their file is an attribute: JSON, the held-out
    hash, copies and pickles see the columns only, and rows loaded for a run are plain dicts."""
    import pickle

    from rlvr.kit import in_test_split
    from rlvr.kit.data import SourcedRow

    row = SourcedRow({"question": "q", "answer": "1"}, Path("d.jsonl"), "line 3")
    assert json.dumps(row) == json.dumps(dict(row)) and in_test_split(row) == in_test_split(dict(row))
    assert row.copy().source == (Path("d.jsonl"), "line 3") and type(pickle.loads(pickle.dumps(row))) is dict


def test_good_rows_pass_every_check_and_a_limit_reads_no_further(tmp_path):
    from rlvr.recipe.rows import check_rows

    data = write_rows(tmp_path / "rows.jsonl", with_bad_row(BAD, at=150))
    recipe = recipe_file(tmp_path / "r.yaml", str(data), data={"train_limit": 100})
    registry = load_registry()
    rec = load_recipe(recipe)
    resolve(rec, registry)
    assert check_rows(rec, registry, ("train",)) == ["train: 100 rows of task 'dataset' read"]
    with pytest.raises(RlvrError, match="line 151: no column 'answer'"):
        check_rows(rec, registry, ("train",), every=True)


def test_a_column_of_chat_messages_passes_and_a_bad_message_is_named_by_its_line(tmp_path):
    """TRL's conversational rows (a `prompt` column of messages) are checked as the prompt renders
    them (rlvr.recipe.template.check_prompt_row): good ones pass, a bad one is named by its line."""
    rows = [{"prompt": [{"role": "user", "content": r["question"]}], "answer": r["answer"]} for r in ROWS]
    bad = {"prompt": [{"role": "human", "content": "What is 2 * 2?"}], "answer": "4"}
    recipe = {"name": "chat", "task": {"name": "dataset", "options": {"path": str(tmp_path / "rows.jsonl"),
                                                                      "columns": ["prompt", "answer"]}},
              "prompt": {"template": "{{prompt}}"}, "rewards": {"math": 1.0}}
    write_rows(tmp_path / "rows.jsonl", rows)
    (tmp_path / "r.yaml").write_text(json.dumps(recipe))
    out = rlvr_cli("validate", "--data", tmp_path / "r.yaml")
    assert out.exit_code == 0, out.output
    write_rows(tmp_path / "rows.jsonl", rows[:30] + [bad] + rows[30:])
    one_line(rlvr_cli("validate", "--data", tmp_path / "r.yaml"),
             "rows.jsonl line 31: column 'prompt' message 1 has role 'human', not one of")


def test_a_built_in_tasks_local_copy_is_named_by_its_line(tmp_path, monkeypatch):
    """GSM8K read from a local copy (RLVR_DATA_DIR): a row without its answer is named by the
    copy's file and line, before any model loads (it was a KeyError naming no line)."""
    copy = tmp_path / "gsm8k"
    write_rows(copy / "train.jsonl", ROWS[:40] + [BAD] + ROWS[40:])
    write_rows(copy / "test.jsonl", ROWS[:20])
    monkeypatch.setenv("RLVR_DATA_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    recipe = Path(__file__).resolve().parents[2] / "tasks" / "gsm8k.yaml"
    message = "gsm8k/train.jsonl line 41: no column 'answer' (the reward 'math' needs it)"
    one_line(rlvr_cli("validate", "--data", recipe), message)
    one_line(rlvr_cli("train", recipe, "--model", NO_MODEL, "--output-dir", tmp_path / "run"), message)
    assert not (tmp_path / "run").exists()


MATH_ROWS = [{"problem": f"What is {a} + 1?", "solution": f"It is \\boxed{{{a + 1}}}."} for a in range(40)]
MBPP_ROWS = [{"task_id": i, "text": f"Return {i}.", "code": f"def f():\n    return {i}",
              "test_list": [f"assert f() == {i}"]} for i in range(40)]


@pytest.mark.parametrize("task, copy, rows, column, prompt, reward, named", [
    ("math", "math/train.jsonl", MATH_ROWS, "solution", "{{problem}}", {"math": 1.0}, "answer"),  # read from it
    ("math", "math/train.jsonl", MATH_ROWS, "problem", "{{problem}}", {"math": 1.0}, "problem"),
    ("mbpp", "mbpp/train.jsonl", MBPP_ROWS, "test_list", "{{text}}", {"code": 1.0}, "test_list"),
    ("mbpp", "mbpp/train.jsonl", MBPP_ROWS, "code", "{{text}}", {"code": 1.0}, "code"),
], ids=["math-solution", "math-problem", "mbpp-tests", "mbpp-code"])
def test_math_and_mbpp_local_copies_name_the_line_of_a_missing_column(tmp_path, monkeypatch, task, copy, rows,
                                                                     column, prompt, reward, named):
    """As GSM8K's: a local copy's row that lacks a column is named by file and line (a KeyError
    naming no line, reported as the task's loading failure)."""
    bad = {k: v for k, v in rows[0].items() if k != column}
    write_rows(tmp_path / copy, rows[:20] + [bad] + rows[20:])
    monkeypatch.setenv("RLVR_DATA_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(json.dumps({"name": "t", "task": task, "data": {"eval_split": "train"},
                                  "prompt": {"template": prompt}, "rewards": reward}))
    one_line(rlvr_cli("validate", "--data", recipe), f"{copy} line 21: no column {named!r}")
