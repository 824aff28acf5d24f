"""Recipes: schema, overrides, profiles, name resolution; no model is ever loaded."""

from pathlib import Path

import pytest

from rlvr import RlvrError
from rlvr.plugins import load_registry
from rlvr.recipe import load_recipe, resolve
from rlvr.template import fields, render

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "tasks").glob("*.yaml"))

BASE = """
name: t
task: {name: arithmetic, options: {size: 10}}
prompt: {template: "{{question}}"}
rewards: {math: 1.0}
sampling: {num_generations: 4}
trainer: {rollout_batch_size: 16, micro_batch_size: 4}
"""


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def write(tmp_path, text):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_shipped_recipes_resolve(path, registry):
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


