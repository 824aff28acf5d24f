"""An unknown key written in TRL's or verl's words gets rlvr's name for it: every entry of the
table in rlvr/recipe/foreign.py, from YAML and from --set, and every target is a real setting."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from rlvr import RlvrError
from rlvr.recipe.foreign import TRL, VERL, foreign_hint
from rlvr.recipe.load import _model_of, load_recipe
from rlvr.recipe.spec import Recipe

BASE = {"name": "t", "task": "gsm8k", "prompt": {"template": "{{question}}"}, "rewards": {"math": 1.0}}


def setting_exists(dotted: str) -> bool:
    """Whether ``dotted`` names a field of the recipe schema (sections through optional ones)."""
    model: type[BaseModel] | None = Recipe
    for part in dotted.split("."):
        if model is None or part not in model.model_fields:
            return False
        model = _model_of(model.model_fields[part].annotation)
    return True


def nested(dotted: str, value) -> dict:
    out: dict = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


def refusal(**kwargs) -> str:
    with pytest.raises(RlvrError) as err:
        load_recipe(BASE, **kwargs)
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("key", sorted(TRL) + sorted(VERL))
def test_every_target_is_a_setting_and_every_key_is_not(key):
    foreign = TRL.get(key) or VERL[key]
    assert all(setting_exists(t) for t in foreign.targets), [t for t in foreign.targets if not setting_exists(t)]
    assert not setting_exists(key)  # else the hint could never be given
    assert foreign.targets or foreign.note  # a key rlvr has no setting for says what to do instead


# A TRL key under each section, but where rlvr's own setting has that name (trainer.seed).
PLACES = [(key, where) for key in sorted(TRL) for where in ("", "trainer.", "sampling.")
          if not setting_exists(f"{where}{key}")]


@pytest.mark.parametrize("key, where", PLACES)
def test_trl_keys_anywhere_get_rlvr_names(key, where):
    message = refusal(overrides=[f"{where}{key}=1"])
    assert message.startswith(f"recipe: {where}{key}: unknown setting; ")
    assert f"(TRL's {key}" in message or f"TRL's {key} has no rlvr setting: " in message
    assert all(t in message for t in TRL[key].targets)


@pytest.mark.parametrize("key", sorted(VERL))
def test_verl_paths_written_nested_or_dotted_get_rlvr_names(key):
    top = key.split(".")[0]
    written = [{"overrides": [f"{key}=1"]}]  # --set: dotted
    if top not in BASE:
        written.append({"path": {**BASE, **nested(key, 1)}})  # YAML: nested sections
    for kwargs in written:
        with pytest.raises(RlvrError) as err:
            load_recipe(kwargs.pop("path", BASE), **kwargs)
        message = str(err.value)
        assert f"verl's {key}" in message and all(t in message for t in VERL[key].targets), message


@pytest.mark.parametrize("overrides, message", [
    (["trainer.learning_rate=1e-6"], "trainer.learning_rate: unknown setting; did you mean trainer.lr? (TRL's learning_rate)"),
    (["learning_rate=1e-6"], "learning_rate: unknown setting; did you mean trainer.lr? (TRL's learning_rate)"),
    (["trainer.save_steps=10"], "did you mean trainer.save_every? (TRL's save_steps)"),
    (["beta=0.04"], "did you mean algorithm.kl.beta? (TRL's beta)"),
    (["gradient_accumulation_steps=4"], "did you mean trainer.rollout_batch_size, trainer.micro_batch_size?"),
    (["actor_rollout_ref.actor.optim.lr=1e-6"], "did you mean trainer.lr? (verl's actor_rollout_ref.actor.optim.lr)"),
    (["trainr.lr=1"], "did you mean 'trainer'"),  # a plain misspelling keeps its hint
])
def test_the_issue_s_examples(overrides, message):
    assert message in refusal(overrides=overrides)


def test_a_yaml_recipe_in_trl_words(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("task: gsm8k\nprompt: {template: '{{question}}'}\nrewards: {math: 1}\n"
                    "trainer: {learning_rate: 1.0e-6, lr: 1.0e-6}\n")
    with pytest.raises(RlvrError, match=r"r.yaml: trainer.learning_rate: unknown setting; did you mean trainer.lr\? "):
        load_recipe(path)


def test_no_hint_for_a_key_neither_uses():
    assert foreign_hint(("trainer", "lr_typo"), 1) is None
