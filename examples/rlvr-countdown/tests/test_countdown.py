"""The plugin's own tests: run them with `pytest examples/rlvr-countdown`."""

from rlvr.plugins import get_plugin_manager, load_registry

from rlvr_countdown import countdown_reward, countdown_task


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


def test_every_puzzle_is_solvable_and_deterministic():
    rows = list(countdown_task("train", data_dir=None, size=50))
    assert rows == list(countdown_task("train", data_dir=None, size=50))
    assert {r["id"] for r in rows}.isdisjoint({r["id"] for r in countdown_task("test", data_dir=None, size=50)})
    assert all(isinstance(r["target"], int) for r in rows)


def test_rlvr_discovers_the_plugin():
    registry = load_registry(get_plugin_manager())
    assert registry.task("countdown").plugin == "countdown"
    assert registry.reward("countdown").columns == ("numbers", "target")
