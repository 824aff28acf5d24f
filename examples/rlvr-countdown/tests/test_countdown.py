"""The plugin's own tests: run them with `pytest examples/rlvr-countdown`."""

from pathlib import Path

import pytest
import yaml
from rlvr import RlvrError
from rlvr.host.registry import get_plugin_manager, load_registry

from rlvr_countdown import countdown_reward, countdown_task

RECIPE_OPTIONS = yaml.safe_load((Path(__file__).parents[1] / "countdown.yaml").read_text())["task"]["options"]


def values(completions, numbers, target):
    n = len(completions)
    return [s.value for s in countdown_reward([""] * n, completions, [None] * n, numbers=numbers, target=target)]


def test_reward_accepts_a_correct_expression():
    assert values(["thinking... <answer>(3 + 5) * 2</answer>"], [[2, 3, 5]], [16]) == [1.0]


def test_reward_rejects_wrong_value_reused_numbers_and_code():
    got = values(
        ["<answer>3 + 5</answer>", "<answer>5 * 5 - 9</answer>", "<answer>__import__('os')</answer>", "16"],
        [[2, 3, 5]] * 4,
        [16] * 4,
    )
    assert got == [0.0, 0.0, 0.0, 0.0]


def test_division_is_exact():
    assert values(["<answer>(6 / 4) * 4</answer>"], [[4, 4, 6]], [6]) == [1.0]
    assert values(["<answer>7 / 0</answer>"], [[7, 0]], [1]) == [0.0]


def puzzles(split, **options):
    """Each puzzle as a player sees it: the numbers (in any order) and the target."""
    return [(tuple(sorted(r["numbers"])), r["target"]) for r in countdown_task(split, data_dir=None, **options)]


@pytest.mark.parametrize(
    "options",
    [RECIPE_OPTIONS, {**RECIPE_OPTIONS, "size": 200}, {"size": 500}],
    ids=["recipe", "recipe-size-200", "defaults-size-500"],
)
def test_no_test_puzzle_is_in_train_or_repeated(options):
    train, test = puzzles("train", **options), puzzles("test", **options)
    assert len(train) == options["size"]
    assert len(test) >= min(options["size"], 200)
    trained_on = set(train) & set(test)
    assert not trained_on, f"{len(trained_on)} test puzzles are in train, e.g. {sorted(trained_on)[:3]}"
    assert len(test) == len(set(test)), f"test repeats {len(test) - len(set(test))} puzzles"


def test_puzzles_are_deterministic():
    rows = list(countdown_task("train", data_dir=None, size=50))
    assert rows == list(countdown_task("train", data_dir=None, size=50))
    assert rows[:20] == list(countdown_task("train", data_dir=None, size=20))
    assert all(isinstance(r["target"], int) for r in rows)
    assert len({r["id"] for r in rows}) == len(rows)
    with pytest.raises(RlvrError, match="splits train and test"):
        next(countdown_task("validation", data_dir=None))


def test_rlvr_discovers_the_plugin():
    registry = load_registry(get_plugin_manager())
    assert registry.task("countdown").plugin == "countdown"
    assert registry.reward("countdown").columns == ("numbers", "target")
