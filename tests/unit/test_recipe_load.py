"""Recipes: schema, overrides, profiles, name resolution; no model is ever loaded."""

from pathlib import Path

import pytest

from helpers.recipes import BASE
from rlvr import RlvrError
from rlvr.host.registry import load_registry
from rlvr.recipe.load import load_recipe
from rlvr.recipe.resolve import resolve
from rlvr.recipe.template import fields, render

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "tasks").glob("*.yaml"))


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def write(tmp_path, text):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_shipped_recipes_resolve(path, registry, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # they need nothing of the folder a run starts from (a recipe names no secret)
    recipe = load_recipe(path)
    resolve(recipe, registry)
    if "cpu" in recipe.profiles:
        resolve(load_recipe(path, profile="cpu"), registry)


def test_overrides_and_profiles(tmp_path):
    path = write(tmp_path, BASE + "profiles: {small: {trainer: {rollout_batch_size: 8}}}\n")
    recipe = load_recipe(path, ["trainer.lr=3e-6", "sampling.temperature=0.7"], profile="small")
    assert recipe.trainer.lr == 3e-6 and recipe.sampling.temperature == 0.7
    assert recipe.trainer.rollout_batch_size == 8
    assert recipe.rewards["math"].weight == 1.0


@pytest.mark.parametrize(
    "text, overrides, message",
    [
        (BASE, ["trainer.rollout_batch_size=18"], "must be divisible by sampling.num_generations"),
        (BASE, ["trainer.micro_batch_size=5"], "must divide"),
        (BASE, ["sampling.num_generations=1"], "sampling.num_generations"),
        (BASE, ["trainer.lr=abc"], "trainer.lr"),
        (BASE, ["trainer.learning_rate=1"], "unknown setting"),
        (BASE, ["trainr.lr=1"], "did you mean 'trainer'"),
        # a misspelt required key: the unknown one is named (with the right one), not the missing one
        (BASE.replace("rewards:", "reward:"), [], "reward: unknown setting (did you mean 'rewards'?)"),
        (BASE, ["algorithm.kl.estimator=k4"], "algorithm.kl.estimator"),
        (BASE, ["noequals"], "key=value"),
        ("name: [unclosed", [], "malformed YAML"),
        ("- a list", [], "a recipe is a YAML mapping"),
    ],
)
def test_bad_recipes_give_one_line(tmp_path, text, overrides, message):
    with pytest.raises(RlvrError) as err:
        load_recipe(write(tmp_path, text), overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["rewards.mathh=1"], "unknown reward 'mathh' (did you mean 'math'?)"),
        (["task.name=gsm9k"], "did you mean 'gsm8k'"),
        (['prompt.template="{{questoin}}"'], "did you mean 'question'"),
        (["rewards.math={options: {extrct: boxed}}"], "has no option 'extrct'"),
        (["rewards.countdown=1"], "needs column 'numbers'"),
        (["data.train_split=trian"], "did you mean 'train'"),
        (["task.options.sise=3"], "did you mean 'size'"),
        (["eval.correctness_reward=format"], "not among the recipe's rewards"),
    ],
)
def test_names_resolve_or_fail_with_a_hint(tmp_path, registry, overrides, message):
    recipe = load_recipe(write(tmp_path, BASE), overrides)
    with pytest.raises(RlvrError) as err:
        resolve(recipe, registry)
    assert message in str(err.value)


def test_missing_recipe(tmp_path):
    with pytest.raises(RlvrError, match="recipe not found"):
        load_recipe(tmp_path / "nope.yaml")


def test_unknown_profile(tmp_path):
    with pytest.raises(RlvrError, match="no profile 'gpu'"):
        load_recipe(write(tmp_path, BASE), profile="gpu")


def test_latex_braces_in_prompts_are_literal(tmp_path, registry):
    recipe = load_recipe(write(tmp_path, BASE), ["prompt.system=Put it in \\boxed{} as \\frac{a}{b}."])
    resolve(recipe, registry)
    assert render(recipe.prompt.system, {"question": "q"}) == "Put it in \\boxed{} as \\frac{a}{b}."


@pytest.mark.parametrize(
    "text, message",
    [
        ("Answer in \\boxed{{}}.", "'{{}}' is not a field"),  # str.format's escape of {}
        ("{{question}} then {{ 2x }}", "'{{ 2x }}' is not a field"),
        ("{question}", "{question} would reach the model as literal text: write {{question}}"),
    ],
)
def test_malformed_prompt_fields_fail_at_validate(tmp_path, registry, text, message):
    recipe = load_recipe(write(tmp_path, BASE.replace('"{{question}}"', repr(text))))
    with pytest.raises(RlvrError) as err:
        resolve(recipe, registry)
    assert message in str(err.value) and "prompt.template" in str(err.value)


def test_template_needs_a_field(tmp_path, registry):
    recipe = load_recipe(write(tmp_path, BASE), ["prompt.template=Solve it."])
    with pytest.raises(RlvrError, match="every prompt would be the same"):
        resolve(recipe, registry)


def test_render_is_one_pass_and_leaves_values_alone():
    row = {"question": "What is {{answer}} in \\boxed{x}?", "answer": "42", "n-1": 3}
    assert render("Q: {{ question }} ({{n-1}})", row) == "Q: What is {{answer}} in \\boxed{x}? (3)"
    assert fields("{{a}} {b} {{ c }}") == ["a", "c"]
    with pytest.raises(RlvrError, match="no column 'missing'"):
        render("{{missing}}", row)


@pytest.mark.parametrize("where", ["template", "system"])
def test_gold_column_in_prompt_is_refused(tmp_path, registry, where):
    extra = [f"prompt.system=The answer is {{{{answer}}}}."] if where == "system" else [
        "prompt.template={{question}} (answer: {{answer}})"]
    recipe = load_recipe(write(tmp_path, BASE), extra)
    with pytest.raises(RlvrError) as err:
        resolve(recipe, registry)
    assert "gold answer reward 'math' checks against" in str(err.value)
    assert "prompt.gold_in_prompt" in str(err.value)
    # An explicit opt-in lets it through; naming a column no reward checks is an error.
    resolve(load_recipe(write(tmp_path, BASE), extra + ["prompt.gold_in_prompt=[answer]"]), registry)
    with pytest.raises(RlvrError, match="'question' is not a gold column"):
        resolve(load_recipe(write(tmp_path, BASE), extra + ["prompt.gold_in_prompt=[question]"]), registry)


def test_gold_follows_the_column_mapping_and_the_eval_prompt(tmp_path, registry):
    mapped = ["rewards.math={columns: {answer: question}}"]
    with pytest.raises(RlvrError, match="shows {{question}}"):
        resolve(load_recipe(write(tmp_path, BASE), mapped), registry)
    with pytest.raises(RlvrError, match="^eval.prompt shows {{answer}}"):
        resolve(load_recipe(write(tmp_path, BASE), ["eval.prompt={template: '{{question}} {{answer}}'}"]), registry)




# ------------------------------------------------------------------ stricter loading (validate's promises)
SHORT = """
name: t
task: gsm8k
prompt: {template: "{{question}}"}
rewards: {math: 1.0, format: 0.1}
sampling: {num_generations: 4}
trainer: {rollout_batch_size: 16, micro_batch_size: 4}
"""


def test_set_reaches_into_shorthand_entries(tmp_path):
    path = write(tmp_path, SHORT)
    recipe = load_recipe(path, ["task.options.size=100", "rewards.format.weight=0.2", "rewards.format.options.think=true"])
    assert recipe.task.name == "gsm8k" and recipe.task.options == {"size": 100}
    assert recipe.rewards["format"].weight == 0.2 and recipe.rewards["format"].options == {"think": True}
    assert recipe.rewards["math"].weight == 1.0
    eval_short = write(tmp_path, SHORT + "eval: {task: arithmetic}\n")
    assert load_recipe(eval_short, ["eval.task.options.size=5"]).eval.task.options == {"size": 5}
    with pytest.raises(RlvrError, match="trainer.lr is 1e-06, not a section"):
        load_recipe(path, ["trainer.lr=1e-6", "trainer.lr.x=1"])
    with pytest.raises(RlvrError, match="empty name"):
        load_recipe(path, ["trainer..lr=1"])


def test_profiles_merge_into_shorthand_entries(tmp_path):
    path = write(tmp_path, SHORT + "profiles: {p: {rewards: {format: {options: {think: true}}}, task: {options: {size: 3}}}}\n")
    recipe = load_recipe(path, profile="p")
    assert recipe.rewards["format"].weight == 0.1 and recipe.rewards["format"].options == {"think": True}
    assert recipe.task.name == "gsm8k" and recipe.task.options == {"size": 3}


def test_exponents_are_numbers_for_integer_and_float_fields(tmp_path):
    """YAML 1.1 reads 1e3 (no dot) as a string; recipes read it as YAML 1.2 does."""
    path = write(tmp_path, BASE + "data: {train_limit: 1e3}\n")
    recipe = load_recipe(path, ["trainer.steps=2e2", "trainer.lr=3e-6", "sampling.max_tokens=1.5E3"])
    assert recipe.data.train_limit == 1000 and recipe.trainer.steps == 200 and recipe.trainer.lr == 3e-6
    assert recipe.sampling.max_tokens == 1500
    with pytest.raises(RlvrError, match="trainer.steps"):
        load_recipe(path, ["trainer.steps=1.5e0"])  # 1.5 is not an integer
    assert load_recipe(path, ["name=1e3x"]).name == "1e3x"


def test_duplicate_keys_are_refused_with_their_line(tmp_path):
    text = BASE + "trainer: {steps: 3}\n"
    with pytest.raises(RlvrError, match=r"line 8: malformed YAML: duplicate key 'trainer' \(first given on line 7\)"):
        load_recipe(write(tmp_path, text))
    with pytest.raises(RlvrError, match="duplicate key 'steps'"):
        load_recipe(write(tmp_path, BASE.replace("micro_batch_size: 4", "micro_batch_size: 4, steps: 1, steps: 2")))
    # YAML merge keys are not duplicates: explicit keys override merged ones.
    merged = BASE + "x-base: &b {steps: 5, lr: 1.0e-5}\n"
    with pytest.raises(RlvrError, match="x-base: unknown setting"):  # parsed fine; the schema refuses x-base
        load_recipe(write(tmp_path, merged + "algorithm: {clip: {<<: {eps_low: 0.1}, eps_low: 0.3}}\n"))
    recipe = load_recipe(write(tmp_path, BASE.replace("sampling:", "algorithm: {clip: {<<: {eps_low: 0.1}, eps_low: 0.3}}\nsampling:")))
    assert recipe.algorithm.clip.eps_low == 0.3


@pytest.mark.parametrize(
    "extra, overrides, message",
    [
        ("", ["trainer.lr=.nan"], "trainer.lr: not a finite number"),
        ("", ["trainer.lr=nan"], "trainer.lr: Input should be a finite number"),
        ("", ["sampling.temperature=1e999"], "sampling.temperature: not a finite number"),
        ("", ["task.options.size=.inf"], "task.options.size: not a finite number"),
        ("", ["rewards.math.options.timeout=-.inf"], "rewards.math.options.timeout: not a finite number"),
        ("profiles: {p: {trainer: {lr: .nan}}}\n", [], "profiles.p.trainer.lr: not a finite number"),
        ("", ["eval.k=[1, .nan]"], "eval.k.1: not a finite number"),
        ("", ["algorithm.clip.eps_low=1"], "algorithm.clip.eps_low: Input should be less than 1"),
        ("", ["algorithm.clip.eps_low=1.5"], "algorithm.clip.eps_low"),
        ("", ["rewards.math=0"], "every reward has weight 0"),
        ("", ["rewards.format=0.0", "rewards.math.weight=0"], "every reward has weight 0"),
        ("", ["model.name=./no-such-model"], "no model folder at './no-such-model'"),
        ("", ["model.name=/no/such/model"], "no model folder at '/no/such/model'"),
        ("", ["model.name=../no-such-model"], "no model folder at '../no-such-model'"),
        ("", ["model.name=~/no-such-model"], "no model folder at '~/no-such-model'"),
        ("", ["model.name=runs/no-such-run/final"], "no model folder at 'runs/no-such-run/final'"),
        ("", ["model.name=' '"], "empty model name"),
    ],
)
def test_validate_refuses_what_would_fail_or_mislead_later(tmp_path, extra, overrides, message):
    with pytest.raises(RlvrError) as err:
        load_recipe(write(tmp_path, BASE + extra), overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_model_names_that_are_not_paths_pass_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = write(tmp_path, BASE)
    for name in ("smollm2-135m-instruct", "Qwen/Qwen2.5-0.5B-Instruct", "gpt2"):
        assert load_recipe(path, [f"model.name={name}"]).model.name == name
    (tmp_path / "local" / "model").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    for name in ("./local/model", "local/model", str(tmp_path / "local" / "model")):
        assert load_recipe(path, [f"model.name={name}"]).model.name == name
    assert load_recipe(path, ["rewards.math=-0.5", "rewards.format=1"]).rewards["math"].weight == -0.5


def test_profile_errors_name_the_profile(tmp_path):
    path = write(tmp_path, BASE + "profiles: {cpu: {trainer: {micro_batch_size: 3}}}\n")
    load_recipe(path)
    with pytest.raises(RlvrError, match=r"r.yaml \(profile 'cpu'\): recipe: trainer.micro_batch_size \(3\) must divide"):
        load_recipe(path, profile="cpu")


def test_a_loader_that_raises_is_one_line_naming_task_and_split(tmp_path):
    from rlvr.host.registry import TaskSpec
    from rlvr.recipe.resolve import task_rows
    from rlvr.recipe.spec import TaskRef

    def load(split, *, data_dir, n: int = 2):
        yield {"question": "q", "answer": "a"}
        raise KeyError("answer\nmissing")

    task = TaskSpec("flaky", load, "", "flakyplug", "0", ("question", "answer"), ("train",))
    rows = task_rows(task, TaskRef(name="flaky"), "train", tmp_path)
    assert next(rows) == {"question": "q", "answer": "a"}
    with pytest.raises(RlvrError) as err:
        next(rows)
    assert str(err.value) == "task 'flaky' (plugin 'flakyplug') split 'train': loading failed: KeyError: 'answer\\nmissing'"
    not_rows = TaskSpec("lists", lambda split, *, data_dir: iter([[1, 2]]), "", "p", "0", ("q",), ("train",))
    with pytest.raises(RlvrError, match="row 1 is a list, not a mapping of columns"):
        list(task_rows(not_rows, TaskRef(name="lists"), "train", tmp_path))


def test_rewards_declare_their_gold(tmp_path, registry):
    code = BASE.replace("task: {name: arithmetic, options: {size: 10}}", "task: humaneval").replace(
        "rewards: {math: 1.0}", "rewards: {code: 1.0}").replace("{{question}}", "{{prompt}}")
    text = code + "data: {train_split: test}\n"
    resolve(load_recipe(write(tmp_path, text)), registry)  # code reads `prompt`, but it is no answer key
    with pytest.raises(RlvrError, match="shows {{test}}, the gold answer reward 'code'"):
        resolve(load_recipe(write(tmp_path, text.replace("{{prompt}}", "{{prompt}} {{test}}"))), registry)
    countdown = BASE.replace("arithmetic, options: {size: 10}", "countdown").replace("{math: 1.0}", "{countdown: 1.0}")
    resolve(load_recipe(write(tmp_path, countdown.replace("{{question}}", "Reach {{target}} from {{numbers}}"))),
            registry)  # registered with gold=(): its columns are the puzzle


def test_a_gold_declaration_must_name_a_column():
    from rlvr import hookimpl
    from rlvr.host.registry import get_plugin_manager, load_registry

    class Plugin:
        @hookimpl
        def rlvr_register_rewards(self, register):
            register("exact", lambda prompts, completions, ids, *, answer: [0.0] * len(completions), gold=["answr"])

    pm = get_plugin_manager(load_entry_points=False)
    pm.register(Plugin(), name="p")
    with pytest.raises(RlvrError, match="gold column 'answr' is not one of its columns"):
        load_registry(pm).reward("exact")  # registration left it out; using it says why


@pytest.mark.parametrize(
    "value, message",
    [("abc", "option size: 'abc' is not an integer"), ("2.5", "option size: 2.5 is not an integer"),
     ("true", "option size: True is not an integer")],
)
def test_task_options_are_checked_from_the_loader_signature(tmp_path, registry, value, message):
    recipe = load_recipe(write(tmp_path, BASE), [f"task.options.size={value}"])
    with pytest.raises(RlvrError, match=f"task.options: task 'arithmetic' {message}"):
        resolve(recipe, registry)


def test_task_options_are_converted_before_loading(tmp_path, registry):
    from rlvr.recipe.resolve import load_rows

    recipe = load_recipe(write(tmp_path, BASE), ["task.options.size=1e2"])
    resolve(recipe, registry)
    assert recipe.task.options["size"] == 100 and type(recipe.task.options["size"]) is int
    assert len(load_rows(registry, recipe.task, "train")) > 50
