"""The `rlvr` command: listings, validate, score, and clean failures (exit 2, one line)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_plugins_json_lists_builtins_and_the_example(rlvr_cmd):
    out = rlvr_cmd("plugins", "--json")
    assert out.returncode == 0, out.stderr
    plugins = {p["name"]: p for p in json.loads(out.stdout)}
    assert {"math", "code", "format", "length", "tasks", "countdown"} <= set(plugins)
    assert plugins["math"]["rewards"] == ["math"]
    assert plugins["countdown"]["version"] == "rlvr-countdown 0.1.0"
    assert "rlvr_register_tasks" in plugins["countdown"]["hooks"]


def test_tasks_and_rewards_listings(rlvr_cmd):
    tasks = rlvr_cmd("tasks").stdout
    assert "gsm8k" in tasks and "countdown" in tasks
    rewards = rlvr_cmd("rewards").stdout.splitlines()
    assert any(line.startswith("math") and "columns: answer" in line for line in rewards)


def test_validate_shipped_and_example_recipes(rlvr_cmd):
    recipes = sorted(str(p) for p in (ROOT / "tasks").glob("*.yaml"))
    out = rlvr_cmd("validate", *recipes, str(ROOT / "examples/rlvr-countdown/countdown.yaml"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.count(": ok") == len(recipes) + 1


def test_validate_reads_local_data(rlvr_cmd):
    out = rlvr_cmd("validate", "--data", ROOT / "tasks/gsm8k.yaml")
    assert out.returncode == 0, out.stderr


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


def test_light_commands_do_not_import_torch():
    code = (
        "import sys\n"
        "from rlvr.cli import cli\n"
        "for args in (['plugins', '--json'], ['validate', 'tasks/gsm8k.yaml'], ['--help']):\n"
        "    try:\n"
        "        cli(args, standalone_mode=False)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = [m for m in ('torch', 'vllm', 'deepspeed', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_validate_refuses_lora_with_zero3(rlvr_cmd):
    """Checks that do not depend on the number of ranks belong to the recipe: validate catches them."""
    out = rlvr_cmd("validate", ROOT / "tasks/demo.yaml", "--set", "model.lora={r: 4}", "--set", "trainer.zero_stage=3")
    assert out.returncode == 2 and "model.lora with trainer.zero_stage 3" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_validate_data_measures_prompts_under_max_prompt_tokens(rlvr_cmd, smollm_path):
    recipe = ROOT / "tasks/demo.yaml"
    refused = rlvr_cmd("validate", "--data", recipe, "--set", "data.max_prompt_tokens=30",
                       "--set", "data.overlong_prompts=error")
    assert refused.returncode == 2 and "over data.max_prompt_tokens 30" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    dropped = rlvr_cmd("validate", "--data", recipe, "--set", "data.max_prompt_tokens=40")
    assert dropped.returncode == 0, dropped.stderr
    assert "train: longest prompt" in dropped.stdout and "over data.max_prompt_tokens dropped" in dropped.stdout


@pytest.mark.slow
def test_eval_sizes_the_context_from_the_rendered_prompt(rlvr_cmd, tiny_model, tmp_path):
    """The system prompt and chat template count: a model whose context holds the bare question
    plus max_tokens, but not the rendered prompt, is refused before any sampler starts."""
    import shutil

    from transformers import AutoTokenizer

    from rlvr.prompts import render_prompt
    from rlvr.recipe import load_recipe

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
