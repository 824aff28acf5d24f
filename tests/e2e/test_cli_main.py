"""The `rlvr` command: listings, validate, score, and clean failures (exit 2, one line)."""

import json
import math
import re
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import RLVR, one_line_error, run_rlvr, wait_until
from helpers.cli_main import write_records, listing, _interrupt_score

ROOT = Path(__file__).resolve().parents[2]


def test_plugins_json_lists_builtins_and_the_example(rlvr_cmd):
    out = rlvr_cmd("plugins", "--json")
    assert out.returncode == 0, out.stderr
    plugins = {p["name"]: p for p in json.loads(out.stdout)}
    assert {"math", "code", "format", "length", "tasks", "countdown"} <= set(plugins)
    assert plugins["math"]["rewards"] == ["math"]
    assert plugins["countdown"]["version"] == "rlvr-countdown 0.1.0"
    assert "rlvr_register_tasks" in plugins["countdown"]["hooks"]
    assert plugins["python_env"]["environments"] == ["python"] and plugins["math"]["environments"] == []


def test_environments_listing(rlvr_cmd):
    out = rlvr_cmd("environments")
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("python "))
    assert "python_env" in line and "timeout_s=5.0" in line and "isolation='bwrap'" in line
    assert "  environments: python" in rlvr_cmd("plugins").stdout


def test_tasks_and_rewards_listings(rlvr_cmd):
    tasks = rlvr_cmd("tasks").stdout
    assert "gsm8k" in tasks and "countdown" in tasks
    out = rlvr_cmd("rewards")
    assert out.returncode == 0, out.stderr
    # One block a reward: its name and plugin, then indented columns, optional columns, options.
    blocks = {b.split(" ", 1)[0]: b for b in re.split(r"\n(?=\S)", out.stdout.strip())}
    assert {"math", "code", "format", "overlong", "countdown"} <= set(blocks)
    assert blocks["math"].startswith("math (plugin math): ") and "\n  columns: answer\n" in blocks["math"]
    code = blocks["code"].splitlines()
    assert "  optional columns: prompt, test, entry_point, test_list, test_setup_code, io_tests" in code
    assert "  gold (a prompt may not show it): test, test_list, io_tests" in code
    assert "\n  gold (a prompt may not show it): answer\n" in blocks["math"]
    assert "\n  gold (a prompt may not show it): -\n" in blocks["countdown"]
    options = {line.split()[0]: line.strip() for line in code if line.startswith("    ")}
    assert re.fullmatch(r"timeout = 10\.0 +a number > 0 and <= 3600", options["timeout"])
    assert re.fullmatch(r"memory_mb = 1024 +an integer >= 64", options["memory_mb"])
    assert re.fullmatch(r"isolation = 'bwrap' +one of bwrap, process", options["isolation"])
    assert re.fullmatch(r"partial = False +true or false", options["partial"])
    assert "\n  options: -" in blocks["countdown"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["validate", "tasks/humaneval.yaml", "--set", "rewards.code.options.timeout=-5"],
         "reward 'code' option timeout: -5 is not a number > 0 and <= 3600"),
        (["validate", "tasks/demo.yaml", "--set", "rewards.format.options={boxed: one, partial: maybe}"],
         "reward 'format' option partial: 'maybe' is not true or false"),
        (["validate", "tasks/demo.yaml", "--set", "rewards.format.options.boxd=one"],
         "reward 'format' has no option 'boxd' (did you mean 'boxed'?)"),
        (["score", "--reward", "format", "--option", "think=2", "--input", "missing.jsonl", "--output", "o.jsonl"],
         "reward 'format' option think: 2 is not true or false"),
        (["score", "--reward", "code", "--option", "isolation=procss", "--input", "missing.jsonl", "--output", "o.jsonl"],
         "reward 'code' option isolation: 'procss' is not one of bwrap, process (did you mean 'process'?)"),
        (["score", "--reward", "format", "--option", "partial", "--input", "missing.jsonl", "--output", "o.jsonl"],
         "--option expects KEY=VALUE (e.g. timeout=5), got 'partial'"),
    ],
)
def test_bad_reward_options_exit_2_saying_what_is_allowed(rlvr_cmd, args, message):
    """validate and score check options from the reward's signature, before reading any input."""
    out = rlvr_cmd(*args, cwd=ROOT)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlvr: error: ") and message in lines[0], out.stderr


def test_validate_shipped_and_example_recipes(rlvr_cmd, tmp_path):
    recipes = sorted(str(p) for p in (ROOT / "tasks").glob("*.yaml"))
    out = rlvr_cmd("validate", *recipes, str(ROOT / "examples/rlvr-countdown/countdown.yaml"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count(": ok") == len(recipes) + 1
    # the judge demo's secret is the user's (--secret, as make judge-demo gives it); a secret file
    # that is not there is refused before anything loads, in one line
    missing = rlvr_cmd("validate", ROOT / "tasks" / "judge_demo.yaml", "--secret",
                       "127.0.0.1:8001=runs/judge-sampler.secret", cwd=tmp_path)
    one_line_error(missing, "reward 'judge' option base_url: 'http://127.0.0.1:8001/v1': the secret for "
                            "127.0.0.1:8001: cannot read the secret file runs/judge-sampler.secret: No such file")


def test_validate_reads_local_data(rlvr_cmd, tmp_path):
    out = rlvr_cmd("validate", "--data", ROOT / "tasks/gsm8k.yaml")
    assert out.returncode == 0, out.stderr
    assert "train: 7473 rows of task 'gsm8k' read" in out.stdout and "test: 1319 rows" in out.stdout
    # every line is read: a malformed line far down a copy is named by file and line
    from rlvr.kit.data import data_dir

    lines = (data_dir() / "gsm8k" / "train.jsonl").read_text().splitlines()
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text((data_dir() / "gsm8k" / "test.jsonl").read_text())
    lines[4000] = lines[4000][:-5]
    (tmp_path / "gsm8k" / "train.jsonl").write_text("\n".join(lines) + "\n")
    bad = rlvr_cmd("validate", "--data", ROOT / "tasks/gsm8k.yaml", env={"RLVR_DATA_DIR": str(tmp_path)})
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert bad.stderr.startswith(f"rlvr: error: {ROOT}/tasks/gsm8k.yaml: {tmp_path}/gsm8k/train.jsonl:4001: not valid "
                                 "JSON ("), bad.stderr


# No route to the hub: a closed local port stands in for it, whatever network CI has.
NO_HUB = {"HF_ENDPOINT": "http://127.0.0.1:9", "HTTPS_PROXY": "", "https_proxy": "", "ALL_PROXY": "", "all_proxy": ""}


def test_cpu_profiles_train_on_local_or_generated_data_only(rlvr_cmd):
    """The three recipes' CPU variants read nothing from the hub (train and eval splits)."""
    recipes = [ROOT / f"tasks/{name}.yaml" for name in ("gsm8k", "math", "humaneval")]
    out = rlvr_cmd("validate", "--data", "--profile", "cpu", *recipes, env=NO_HUB)
    assert out.returncode == 0, out.stderr
    assert "math.yaml: ok (gsm8k" in out.stdout and "humaneval.yaml: ok (pyfunc" in out.stdout


def test_hub_only_data_fails_at_once_when_the_hub_is_unreachable(rlvr_cmd, tmp_path):
    out = rlvr_cmd("validate", "--data", ROOT / "tasks/humaneval.yaml", env={**NO_HUB, "HF_HOME": str(tmp_path)})
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "hub is unreachable" in lines[0] and "RLVR_DATA_DIR" in lines[0]
    # what to put where: the variable, the file it expects under it, and the hub id
    assert "set RLVR_DATA_DIR to a folder holding mbpp/train.jsonl (the split as JSONL)" in lines[0], lines[0]
    assert "'google-research-datasets/mbpp' split 'train'" in lines[0], lines[0]


def test_model_names_are_checked_before_anything_loads(rlvr_cmd, tmp_path):
    misspelt = rlvr_cmd("validate", ROOT / "tasks/demo.yaml", "--set", "model.name=smollm2-135m-instruc")
    assert misspelt.returncode == 2 and len(misspelt.stderr.strip().splitlines()) == 1
    assert "did you mean the alias 'smollm2-135m-instruct'" in misspelt.stderr
    (tmp_path / "weights").mkdir()
    empty = rlvr_cmd("validate", ROOT / "tasks/demo.yaml", "--set", f"model.name={tmp_path / 'weights'}")
    assert empty.returncode == 2 and "no config.json in it" in empty.stderr
    for name in ("gpt2", "HuggingFaceTB/SmolLM2-135M-Instruct"):  # a recipe validates where its hub model cannot be had
        assert rlvr_cmd("validate", ROOT / "tasks/demo.yaml", "--set", f"model.name={name}").returncode == 0
    for name, alias in (("smollm2-135m", "smollm2-135m-instruct"), ("Qwen2.5-Coder-0.5B-Instruct",
                                                                   "qwen2.5-coder-0.5b-instruct")):
        short = rlvr_cmd("validate", ROOT / "tasks/demo.yaml", "--set", f"model.name={name}")
        assert short.returncode == 2 and f"did you mean the alias '{alias}'" in short.stderr, short.stderr


def test_validate_checks_and_reports_every_recipe_it_is_given(rlvr_cmd, tmp_path):
    """Of several recipes each is checked and reported, whatever the ones before it gave; the
    status is 2 if any failed, with a last line naming them."""
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "tasks/demo.yaml").read_text().replace("name: smollm2-135m-instruct", "name: smollm2"))
    typo = tmp_path / "typo.yaml"
    typo.write_text((ROOT / "tasks/demo.yaml").read_text() + "\ntrainr: {}\n")
    out = rlvr_cmd("validate", bad, ROOT / "tasks/demo.yaml", typo, ROOT / "tasks/tool_demo.yaml")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert [line.split(":")[0] for line in out.stdout.splitlines() if ": ok (" in line] == [
        str(ROOT / "tasks/demo.yaml"), str(ROOT / "tasks/tool_demo.yaml")]
    errors = out.stderr.strip().splitlines()
    assert len(errors) == 3 and errors[0].startswith(f"rlvr: error: {bad}") and "did you mean the alias" in errors[0]
    assert errors[1].startswith(f"rlvr: error: {typo}") and "trainr" in errors[1], errors
    assert errors[2] == f"rlvr: error: 2 of 4 recipes failed: {bad}, {typo}"


@pytest.mark.parametrize("offline", [{"HF_HUB_OFFLINE": "1"}, {}], ids=["HF_HUB_OFFLINE", "unreachable"])
def test_a_hub_model_that_cannot_be_had_is_one_line_in_seconds(rlvr_cmd, tmp_path, offline):
    """Neither in the hub cache nor reachable: refused before a run starts (transformers' retries
    took 52 s to say so), naming the alias that is the same model when there is one."""
    import time

    for model, alias in (("someorg/no-such-model", None), ("Qwen/Qwen2.5-Coder-0.5B-Instruct",
                                                           "qwen2.5-coder-0.5b-instruct")):
        start = time.monotonic()
        out = rlvr_cmd("eval", ROOT / "tasks/demo.yaml", "--model", model, "--output-dir", tmp_path / "ev",
                       env={**NO_HUB, **offline, "HF_HOME": str(tmp_path)})
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
        assert time.monotonic() - start < 30
        (line,) = out.stderr.strip().splitlines()
        assert line.startswith(f"rlvr: error: model '{model}': the hub cannot be reached "
                               "and the hub cache does not hold it"), line
        assert (f"the alias '{alias}' is this model" in line) == bool(alias), line
        assert not (tmp_path / "ev").exists()  # refused before the run's folder was made


@pytest.mark.parametrize(
    "args, message",
    [
        (["validate", "missing.yaml"], "recipe not found"),
        (["validate", "tasks/demo.yaml", "--set", "rewards.mth=1"], "did you mean 'math'"),
        (["validate", "tasks/demo.yaml", "--set", "trainer.rollout_batch_size=7"], "divisible"),
        (["validate", "tasks/demo.yaml", "--profile", "nope"], "no profile"),
        (["score", "--reward", "nope", "--input", "x", "--output", "y"], "unknown reward"),
        (["train", "tasks/demo.yaml", "--set", "trainer.micro_batch_size=3"], "must divide"),
    ],
)
def test_bad_input_exits_2_with_one_line(rlvr_cmd, args, message):
    out = rlvr_cmd(*args, cwd=ROOT)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_score_round_trip(rlvr_cmd, tmp_path):
    records = [
        {"completion": "so \\boxed{42}", "answer": "#### 42", "id": 1},
        {"completion": "I think \\boxed{41}", "answer": "42", "id": 2},
        {"completion": "no answer", "answer": "42", "id": 3},
    ]
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = rlvr_cmd("score", "--reward", "math", "--input", src, "--output", dst)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [r["id"] for r in rows] == [1, 2, 3]
    assert [r["reward"] for r in rows] == [1.0, 0.0, 0.0]
    assert all(isinstance(r["reward_info"], dict) for r in rows)


def test_score_bad_input_keeps_existing_output(rlvr_cmd, tmp_path):
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"completion": "x", "answer": "1"}\n{not json\n')
    dst.write_text("precious\n")
    out = rlvr_cmd("score", "--reward", "math", "--input", src, "--output", dst)
    assert out.returncode == 2 and "in.jsonl:2: not valid JSON" in out.stderr
    assert dst.read_text() == "precious\n"
    assert list(tmp_path.iterdir()) == [src, dst] or sorted(tmp_path.iterdir()) == sorted([src, dst])


def test_score_missing_column(rlvr_cmd, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"completion": "\\\\boxed{1}"}\n')
    out = rlvr_cmd("score", "--reward", "math", "--input", src, "--output", tmp_path / "o.jsonl")
    assert out.returncode == 2 and "needs column 'answer'" in out.stderr


def test_validate_refuses_lora_with_zero3(rlvr_cmd):
    """Checks that do not depend on the number of ranks belong to the recipe: validate catches them."""
    out = rlvr_cmd("validate", ROOT / "tasks/demo.yaml", "--set", "model.lora={r: 4}", "--set", "trainer.zero_stage=3")
    assert out.returncode == 2 and "model.lora with trainer.zero_stage 3" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_validate_data_measures_prompts_under_max_prompt_tokens(rlvr_cmd, smollm_path):
    recipe = ROOT / "tasks/demo.yaml"
    refused = rlvr_cmd("validate", "--data", recipe, "--set", "data.max_prompt_tokens=30",
                       "--set", "data.overlong_prompts=error")
    assert refused.returncode == 2 and "over data.max_prompt_tokens 30" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    dropped = rlvr_cmd("validate", "--data", recipe, "--set", "data.max_prompt_tokens=40")
    assert dropped.returncode == 0, dropped.stderr
    assert "train: longest prompt" in dropped.stdout and "over data.max_prompt_tokens dropped" in dropped.stdout


def test_eval_sizes_the_context_from_the_rendered_prompt(rlvr_cmd, tiny_model, tmp_path):
    """The system prompt and chat template count: a model whose context holds the bare question
    plus max_tokens, but not the rendered prompt, is refused before any sampler starts."""
    import shutil

    from transformers import AutoTokenizer

    from rlvr.recipe.load import load_recipe
    from rlvr.sampling.prompts import render_prompt

    recipe = load_recipe(ROOT / "tasks/demo.yaml")
    tok = AutoTokenizer.from_pretrained(tiny_model)
    row = {"question": "What is 17 - 20?", "answer": "-3"}
    bare, rendered = len(tok(row["question"])["input_ids"]), len(render_prompt(tok, recipe.prompt, row))
    assert rendered > bare + 10
    model = tmp_path / "short-context"
    shutil.copytree(tiny_model, model)
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = bare + 5 + 32
    (model / "config.json").write_text(json.dumps(config))
    out = rlvr_cmd("eval", ROOT / "tasks/demo.yaml", "--model", model, "--limit", "4", "--set", "eval.max_tokens=32",
                   "--output-dir", tmp_path / "eval")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "over the model's" in out.stderr and len(out.stderr.strip().splitlines()) == 1





def test_score_says_what_the_reward_cost_over_the_whole_file(plugged, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"completion": "x" * n}) + "\n" for n in (1, 2, 3, 4, 5)))
    out = plugged("score", "--reward", "costly", "--input", src, "--output", tmp_path / "o.jsonl", "--batch-size", "2")
    assert out.returncode == 0, out.stderr
    # three batches: requests and tokens summed, seconds_max the largest, seconds_mean over the records
    assert "rlvr: costly: requests 5, seconds_max 0.5, seconds_mean 3, tokens 15\n" in out.stderr


def test_score_output_stream_targets_are_written_not_replaced(plugged, tmp_path):
    src = write_records(tmp_path / "in.jsonl", 3)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    out = plugged("score", "--reward", "needy", "--input", src, "--output", fifo)
    got = reader.communicate(timeout=30)[0]
    assert out.returncode == 0, out.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, not a file put in its place
    assert [json.loads(line)["reward"] for line in got.splitlines()] == [1.0, 1.0, 1.0]
    devnull = plugged("score", "--reward", "needy", "--input", src, "--output", os.devnull)
    assert devnull.returncode == 0, devnull.stderr
    assert stat.S_ISCHR(os.lstat(os.devnull).st_mode)
    dash = plugged("score", "--reward", "needy", "--input", src, "--output", "-")
    assert dash.returncode == 0 and [json.loads(x)["reward"] for x in dash.stdout.splitlines()] == [1.0] * 3
    assert "-> stdout" in dash.stderr
    assert listing(tmp_path) == ["fifo", "in.jsonl"]


def test_score_refuses_a_symlink_and_keeps_modes(plugged, plugin_env, tmp_path):
    """A symlink is never written through (tests/unit/test_kit_files.py: one another user planted).
    A replaced file keeps its mode; a new one follows the umask."""
    src = write_records(tmp_path / "in.jsonl", 2)
    target = tmp_path / "target.jsonl"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "link.jsonl"
    link.symlink_to(target.name)
    one_line_error(plugged("score", "--reward", "needy", "--input", src, "--output", link), "is a symlink")
    assert link.is_symlink() and os.readlink(link) == target.name and target.read_text() == "old\n"
    out = plugged("score", "--reward", "needy", "--input", src, "--output", target)
    assert out.returncode == 0, out.stderr
    assert len(target.read_text().splitlines()) == 2 and stat.S_IMODE(target.stat().st_mode) == 0o640
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to("nowhere.jsonl")
    one_line_error(plugged("score", "--reward", "needy", "--input", src, "--output", dangling), "is a symlink")
    assert not (tmp_path / "nowhere.jsonl").exists()
    for umask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        new = tmp_path / f"new-{umask:o}.jsonl"
        code = f"import os, sys; os.umask({umask}); os.execv(sys.argv[1], sys.argv[1:])"
        done = subprocess.run([sys.executable, "-c", code, RLVR, "score", "--reward", "needy", "--input", str(src),
                               "--output", str(new)], env={**os.environ, **plugin_env}, capture_output=True)
        assert done.returncode == 0, done.stderr
        assert stat.S_IMODE(new.stat().st_mode) == mode, (oct(umask), oct(new.stat().st_mode))
    assert not [p for p in listing(tmp_path) if p.startswith(".")]



def test_score_refuses_bad_paths_and_bad_bytes_in_one_line(plugged, tmp_path):
    src = write_records(tmp_path / "in.jsonl", 2)
    afile = tmp_path / "afile"
    afile.write_text("keep\n")
    one_line_error(plugged("score", "--reward", "needy", "--input", src, "--output", afile / "out.jsonl"),
                   "is a file, not a folder")
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"completion": "ok", "answer": "ok"}\n{"completion": "caf\xe9", "answer": "x"}\n')
    one_line_error(plugged("score", "--reward", "needy", "--input", latin, "--output", tmp_path / "o.jsonl"),
                   "latin.jsonl:2: not UTF-8 text (byte 0xe9")
    one_line_error(plugged("score", "--reward", "needy", "--input", tmp_path, "--output", tmp_path / "o.jsonl"),
                   "--input")
    assert afile.read_text() == "keep\n" and listing(tmp_path) == ["afile", "in.jsonl", "latin.jsonl"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workers", "0"], "'--workers': 0 is not in the range 1<=x<="),
        (["--workers", "-1"], "'--workers'"),
        (["--workers", "100000"], "'--workers'"),
        (["--batch-size", "0"], "'--batch-size': 0 is not in the range 1<=x<=100000"),
        (["--batch-size", "100001"], "'--batch-size'"),
        (["--batch-size", "x"], "'x' is not a valid integer"),
    ],
)
def test_score_bounds_workers_and_batch_size(rlvr_cmd, tmp_path, args, message):
    src = write_records(tmp_path / "in.jsonl", 1)
    one_line_error(rlvr_cmd("score", "--reward", "math", "--input", src, "--output", tmp_path / "o.jsonl", *args),
                   message)
    assert listing(tmp_path) == ["in.jsonl"]


def test_score_names_the_record_in_the_whole_input(plugged, tmp_path):
    """Record 300 sits in the second batch of 256: it is record 300, not 44."""
    src = tmp_path / "in.jsonl"
    rows = [{"completion": "a", "answer": "a"} for _ in range(299)] + [{"completion": "a"}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dst = tmp_path / "out.jsonl"
    dst.write_text("precious\n")
    out = plugged("score", "--reward", "needy", "--input", src, "--output", dst)
    one_line_error(out, "in.jsonl: record 300: reward 'needy' needs column 'answer'")
    assert dst.read_text() == "precious\n"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows[:299] + [{"answer": "a"}]))
    one_line_error(plugged("score", "--reward", "needy", "--input", src, "--output", dst, "--batch-size", "7"),
                   "record 300 has no 'completion' (a string, or chat messages")


def test_score_keeps_scores_when_info_is_not_json(plugged, tmp_path):
    """Choice: the scores are kept; info values JSON cannot hold are written as strings, with a note."""
    src = write_records(tmp_path / "in.jsonl", 3)
    dst = tmp_path / "out.jsonl"
    out = plugged("score", "--reward", "weird", "--input", src, "--output", dst)
    assert out.returncode == 0, out.stderr
    assert "reward_info of 3 records held values that are not JSON" in out.stderr
    rows = [json.loads(line) for line in dst.read_text().splitlines()]  # strict JSON: no NaN token
    assert [r["reward"] for r in rows] == [1.0] * 3
    assert rows[0]["reward_info"]["x"].startswith("<object object") and rows[0]["reward_info"]["nan"] == "nan"
    assert rows[0]["reward_info"]["ok"] == [1, "two"]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_score_math_stops_within_a_second_and_its_workers_go_too(rlvr_cmd, tmp_path):
    """The math reward's checker processes (a worker pool) do not outlive an interrupted score."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"completion": f"\\boxed{{{i}/7 + x^{i}}}", "answer": f"{i}"}) + "\n"
                           for i in range(20000)))
    command = ["score", "--reward", "math", "--workers", "2", "--input", src, "--batch-size", "64"]
    code, took, children = _interrupt_score(command, {}, tmp_path, signal.SIGINT, ready_after=3.0)
    assert code == 130 and took < 1.0, (code, took)
    assert children, "the math reward started no worker processes"
    wait_until(lambda: not any(_alive(pid) for pid in children))
    assert not any(_alive(pid) for pid in children)


def test_plot_needs_steps_and_a_writable_output(rlvr_cmd, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"reward_mean": 0.5}\n[1, 2]\n{"step": "x"}\n')
    one_line_error(rlvr_cmd("plot", run), "no rows with a numeric 'step'")
    (run / "metrics.jsonl").write_text('{"step": 0, "reward_mean": 0.5, "kl": "n/a"}\n{"step": 1, "reward_mean": 0.7}\n{"cut')
    (tmp_path / "afile").write_text("keep\n")
    one_line_error(rlvr_cmd("plot", run, "--output", tmp_path / "afile" / "c.png"), "is a file, not a folder")
    one_line_error(rlvr_cmd("plot", run, "--output", tmp_path / "c.xyz"), "cannot write .xyz images")
    one_line_error(rlvr_cmd("plot", run, "--output", tmp_path), "is a directory")
    old = tmp_path / "curves.png"
    old.write_text("old")
    out = rlvr_cmd("plot", run, "--output", old)
    assert out.returncode == 0, out.stderr
    assert old.read_bytes().startswith(b"\x89PNG")
    svg = rlvr_cmd("plot", run, "--output", tmp_path / "c.svg")
    assert svg.returncode == 0 and (tmp_path / "c.svg").read_text().lstrip().startswith("<?xml")
    assert sorted(listing(tmp_path)) == ["afile", "c.svg", "curves.png", "run"]


def test_misspelt_hook_names_the_plugin_and_the_hook(plugin_path):
    out = run_rlvr("tasks", env={"PYTHONPATH": str(plugin_path), "RLVR_LOAD_PLUGINS": "tasks,typo"})
    one_line_error(out, "plugin 'typo' implements 'rlvr_register_reward', which is not an rlvr hook "
                        "(did you mean 'rlvr_register_rewards'?)")
    assert "RLVR_LOAD_PLUGINS" in out.stderr
    badarg = run_rlvr("tasks", env={"PYTHONPATH": str(plugin_path), "RLVR_LOAD_PLUGINS": "tasks,badarg"})
    one_line_error(badarg, "plugin 'badarg' does not fit rlvr's hooks: Plugin 'badarg' for hook 'rlvr_register_rewards'")
    assert "{'registr'} are declared in the hookimpl" in badarg.stderr
    # Left out, every command works again.
    assert run_rlvr("tasks", env={"PYTHONPATH": str(plugin_path), "RLVR_LOAD_PLUGINS": "tasks"}).returncode == 0


def test_unknown_plugin_in_the_allow_list_is_an_error(rlvr_cmd):
    one_line_error(rlvr_cmd("rewards", env={"RLVR_LOAD_PLUGINS": "math,formt"}),
                   "RLVR_LOAD_PLUGINS names 'formt', which is not an installed plugin (did you mean 'format'?)")


def test_validate_data_names_the_task_and_split_a_loader_fails_on(plugged, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("task: broken\nprompt: {template: '{{question}}'}\nrewards: {needy: 1}\n")
    assert plugged("validate", recipe).returncode == 0
    one_line_error(plugged("validate", "--data", recipe),
                   "task 'broken' (plugin 'clitest') split 'train': loading failed: FileNotFoundError: "
                   "no such file: /data/broken.jsonl second line")


@pytest.mark.parametrize(
    "args, message",
    [
        (["eval", "tasks/demo.yaml", "--k", "1,x"], "--k expects comma-separated positive integers"),
        (["eval", "tasks/demo.yaml", "--k", "0"], "each k must be at least 1"),
        (["eval", "tasks/demo.yaml", "--limit", "0"], "'--limit': 0 is not in the range x>=1"),
        (["eval", "tasks/demo.yaml", "--model", "./no/such/model"], "no model folder at './no/such/model'"),
        (["eval", "tasks/demo.yaml", "--output-dir", "README.md/x"], "README.md is a file, not a folder"),
        (["train", "tasks/demo.yaml", "--max-steps", "0"], "'--max-steps': 0 is not in the range x>=1"),
        (["train", "tasks/demo.yaml", "--max-steps", "1e9x"], "is not a valid integer"),
        (["train", "tasks/demo.yaml", "--output-dir", "README.md"], "Directory 'README.md' is a file"),
        (["model", "pull", "nope"], "unknown model alias 'nope'"),
        (["scor"], "No such command 'scor'"),
        (["validate", "tasks/demo.yaml", "--set", "trainer.lr=.nan"], "trainer.lr: not a finite number"),
    ],
)
def test_other_commands_refuse_bad_options_in_one_line(rlvr_cmd, args, message):
    one_line_error(rlvr_cmd(*args, cwd=ROOT), message)


def test_validate_checks_every_profile(rlvr_cmd, tmp_path):
    recipe = tmp_path / "r.yaml"
    base = (ROOT / "tasks/demo.yaml").read_text()
    recipe.write_text(base + "profiles:\n  good: {trainer: {steps: 2}}\n  bad: {trainer: {micro_batch_size: 3}}\n")
    one_line_error(rlvr_cmd("validate", recipe), "r.yaml (profile 'bad'): recipe: trainer.micro_batch_size (3) must divide")
    one_line_error(rlvr_cmd("validate", recipe, "--profile", "good"), "(profile 'bad')")
    recipe.write_text(base + "profiles:\n  good: {trainer: {steps: 2}}\n  bad: {rewards: {mathh: 1}}\n")
    one_line_error(rlvr_cmd("validate", recipe), "r.yaml (profile 'bad'): unknown reward 'mathh'")
    recipe.write_text(base + "profiles:\n  good: {trainer: {steps: 2}}\n")
    out = rlvr_cmd("validate", recipe)
    assert out.returncode == 0 and "checked with profiles: good" in out.stdout, out.stderr


@pytest.mark.parametrize("name", ["/dev/stdout", "/proc/self/fd/1", "/dev/fd/1"])
def test_score_to_dev_stdout_redirected_to_a_file_appends_to_it(plugin_env, tmp_path, name):
    """`rlvr score ... --output /dev/stdout >> log`: the records go into log through the
    inherited descriptor; the file is neither replaced (the shell would go on writing to an
    unlinked inode) nor truncated (what the shell wrote before would be lost)."""
    src = write_records(tmp_path / "in.jsonl", 2)
    log = tmp_path / "log.txt"
    log.write_text("before\n")
    inode = log.stat().st_ino
    with open(log, "a") as f:
        out = subprocess.run([RLVR, "score", "--reward", "needy", "--input", str(src), "--output", name],
                             stdout=f, stderr=subprocess.PIPE, text=True, env={**os.environ, **plugin_env})
        f.write("after\n")
    assert out.returncode == 0, out.stderr
    lines = log.read_text().splitlines()
    assert lines[0] == "before" and lines[-1] == "after" and len(lines) == 4
    assert [json.loads(x)["reward"] for x in lines[1:3]] == [1.0, 1.0]
    assert log.stat().st_ino == inode


def test_score_takes_chat_completions(plugged, tmp_path):
    """A completion given as chat messages (as TRL and OpenAI-style logs write them) is scored on
    its last assistant turn; the record is written back as it came."""
    src = tmp_path / "in.jsonl"
    chat = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "42"}]
    src.write_text(json.dumps({"completion": chat, "answer": "42"}) + "\n"
                   + json.dumps({"completion": {"role": "assistant", "content": "41"}, "answer": "42"}) + "\n")
    out = plugged("score", "--reward", "needy", "--input", src, "--output", "-")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(x) for x in out.stdout.splitlines()]
    assert [r["reward"] for r in rows] == [1.0, 0.0] and rows[0]["completion"] == chat
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"completion": 5, "answer": "5"}\n')
    one_line_error(plugged("score", "--reward", "needy", "--input", bad, "--output", "-"),
                   "record 1 has no 'completion' (a string, or chat messages")


def test_plot_says_kl_was_not_measured_instead_of_drawing_zeros(tmp_path):
    """With algorithm.kl.beta = 0 the metrics' kl is NaN (nothing measured): its panel says so."""
    import matplotlib

    from rlvr.runs.plotting import plot_metrics

    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "reward_mean": 0.1 * s, "kl": math.nan, "completion_len_mean": 9.0} for s in (1, 2, 3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text, to be read back
        plot_metrics(run, tmp_path / "c.svg")
    assert (tmp_path / "c.svg").read_text().count("not measured") == 2  # KL and the absent zero-variance panel
    rows = [{**r, "kl": 0.01 * r["step"]} for r in rows]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        plot_metrics(run, tmp_path / "c.svg")
    assert (tmp_path / "c.svg").read_text().count("not measured") == 1
