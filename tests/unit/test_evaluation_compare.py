"""`rlvr compare`: the paired change between two evaluations, against hand numbers and the
textbook formulas, and its errors on evaluations that cannot be paired."""

import math
import statistics

import pytest

from rlvr import RlvrError
from rlvr.evaluation.compare import compare_evaluations, describe, paired_change, paired_sums, sign_test_p
from helpers.evaluation_compare import _write_eval, _write_seeded


def test_sign_test_against_hand_counts():
    assert sign_test_p(0, 0) == 1.0  # nothing changed
    assert sign_test_p(1, 1) == 1.0
    assert sign_test_p(0, 5) == pytest.approx(2 / 32)  # all five one way: 2 * (1/2)^5
    assert sign_test_p(9, 1) == pytest.approx(2 * (1 + 10) / 1024)  # 2 * (C(10,0) + C(10,1)) / 2^10
    assert sign_test_p(3, 2) == sign_test_p(2, 3) == 1.0
    # McNemar's exact test on 24 gained, 17 lost: 2 * P(Binomial(41, 1/2) <= 17)
    assert sign_test_p(24, 17) == pytest.approx(2 * sum(math.comb(41, i) for i in range(18)) / 2**41)
    assert 0.34 < sign_test_p(24, 17) < 0.36


def test_paired_change_is_the_paired_z_test_with_newcombes_interval():
    before = [0.0, 0.0, 1.0, 0.5, 0.25, 0.0]
    after = [1.0, 0.0, 1.0, 1.0, 0.0, 0.5]
    d = [a - b for b, a in zip(before, after)]
    c = paired_change(paired_sums(before, after))
    se = statistics.stdev(d) / math.sqrt(len(d))
    assert c["n"] == 6
    assert c["before"] == pytest.approx(1.75 / 6) and c["after"] == pytest.approx(3.5 / 6)
    assert c["change"] == pytest.approx(statistics.fmean(d))
    lo, hi = c["ci95"]
    assert lo < c["change"] < hi and -1 <= lo and hi <= 1
    z = statistics.fmean(d) / se
    assert c["p"] == pytest.approx(2 * (1 - statistics.NormalDist().cdf(z)))
    assert (c["better"], c["worse"], c["same"]) == (3, 1, 2)
    assert c["sign_test_p"] == pytest.approx(2 * (1 + 4) / 16)


def test_sums_over_ranks_give_the_same_answer():
    before = [0.0, 0.125, 0.5, 0.0, 1.0, 0.0, 0.25]
    after = [0.25, 0.125, 0.375, 0.5, 1.0, 0.0, 0.5]
    whole = paired_change(paired_sums(before, after))
    parts = [paired_sums(before[r::2], after[r::2]) for r in range(2)]
    summed = paired_change({k: parts[0][k] + parts[1][k] for k in parts[0]})
    assert summed.pop("ci95") == pytest.approx(whole.pop("ci95"))
    assert summed == pytest.approx(whole)


def _newcombe_from_table(both: int, gained: int, lost: int, neither: int) -> tuple[float, float]:
    """Newcombe (1998), method 10, as the paper writes it for a 2x2 table of paired outcomes:
    ``gained`` failed before and passed after, ``lost`` the reverse. Written from the table's own
    phi = (AD - BC) / sqrt(efgh), independently of rlvr's sums."""
    n, z = both + gained + lost + neither, 1.96

    def wilson(x):
        p = x / n
        centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)

    p_after, p_before = (both + gained) / n, (both + lost) / n
    (l1, u1), (l2, u2) = wilson(both + gained), wilson(both + lost)
    # rows: after passed / failed; columns: before passed / failed
    a, b, c, d = both, gained, lost, neither
    efgh = (a + b) * (c + d) * (a + c) * (b + d)
    phi = (a * d - b * c) / math.sqrt(efgh) if efgh else 0.0
    diff = p_after - p_before
    delta = math.sqrt((p_after - l1) ** 2 - 2 * phi * (p_after - l1) * (u2 - p_before) + (u2 - p_before) ** 2)
    eps = math.sqrt((u1 - p_after) ** 2 - 2 * phi * (u1 - p_after) * (p_before - l2) + (p_before - l2) ** 2)
    return diff - delta, diff + eps


@pytest.mark.parametrize("table", [(12, 9, 2, 27), (5, 24, 17, 1273), (0, 99, 0, 1), (40, 0, 3, 7), (3, 3, 3, 3)])
def test_one_sample_a_problem_gives_newcombes_interval_for_the_2x2_table(table):
    both, gained, lost, neither = table
    before = [1.0] * both + [0.0] * gained + [1.0] * lost + [0.0] * neither
    after = [1.0] * both + [1.0] * gained + [0.0] * lost + [0.0] * neither
    c = paired_change(paired_sums(before, after))
    assert c["ci95"] == pytest.approx(_newcombe_from_table(*table), abs=1e-9)


def test_the_interval_respects_the_possible_range():
    """1% -> 100% (make tool-demo): the normal approximation said "+99.00 points, 95% CI +97.04 to
    +100.96", past what a change can be. Every interval stays within what the accuracies allow."""
    c = paired_change(paired_sums([0.0] * 99 + [1.0], [1.0] * 100))
    lo, hi = c["ci95"]
    assert c["change"] == pytest.approx(0.99) and lo < 0.99 < hi <= 1
    assert "95% CI +93.21 to +99.82" in describe(c)
    worst = paired_change(paired_sums([1.0] * 50, [0.0] * 50))
    assert worst["ci95"][0] == -1.0 and -0.95 < worst["ci95"][1] < -0.85
    rates = [i / 8 for i in range(9)]
    for b in rates:
        for a in rates:
            c = paired_change(paired_sums([b, a, 1.0, 0.0], [a, b, 1.0, 1.0]))
            lo, hi = c["ci95"]
            assert -1 <= lo <= c["change"] <= hi <= 1


def test_no_change_and_a_uniform_change():
    same = paired_change(paired_sums([0.5, 0.0, 1.0], [0.5, 0.0, 1.0]))
    assert same["change"] == 0 and same["p"] == 1.0 and same["sign_test_p"] == 1.0
    shift = paired_change(paired_sums([0.0, 0.25], [0.5, 0.75]))  # every problem +0.5: no spread at all
    assert shift["change"] == 0.5 and shift["p"] == 0.0
    assert shift["ci95"][0] < 0.5 < shift["ci95"][1]  # two problems say little, however alike
    with pytest.raises(ValueError):
        paired_sums([0.0], [0.0, 1.0])


def test_compare_pairs_problems_by_id_not_by_order(tmp_path):
    before = _write_eval(tmp_path / "b", {"a": [False, False], "b": [True, True], "c": [False, True]})
    after = _write_eval(tmp_path / "a", {"c": [True, True], "a": [True, False], "b": [True, True]})
    c = compare_evaluations(before, after)
    assert c["before"] == pytest.approx(1.5 / 3) and c["after"] == pytest.approx(2.5 / 3)
    assert (c["better"], c["worse"], c["same"]) == (2, 0, 1)
    assert c["models"] == {"before": "b", "after": "a"}
    # the samples file itself is accepted too
    assert compare_evaluations(before / "samples.jsonl", after)["change"] == pytest.approx(c["change"])


def test_evaluations_that_cannot_be_paired_are_refused(tmp_path):
    base = _write_eval(tmp_path / "base", {"a": [True], "b": [False]})
    fewer = _write_eval(tmp_path / "fewer", {"a": [True]})
    with pytest.raises(RlvrError, match="different problems"):
        compare_evaluations(base, fewer)
    other = _write_eval(tmp_path / "other", {"a": [True], "b": [False]}, split="train")
    with pytest.raises(RlvrError, match="differ in split"):
        compare_evaluations(base, other)
    with pytest.raises(RlvrError, match="not found"):
        compare_evaluations(base, tmp_path / "missing")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "samples.jsonl").write_text('{"id": "a", "samples": [{"correct": true}]}\n{"id": "b"}\n')
    with pytest.raises(RlvrError, match=r"samples.jsonl:2: not an rlvr eval sample record"):
        compare_evaluations(base, broken)
    (broken / "samples.jsonl").write_text('{"id": "a", "samples": [{"correct": true}]}\n{"id": "b", "samples": []}\n')
    with pytest.raises(RlvrError, match="no samples"):
        compare_evaluations(base, broken)
    (broken / "samples.jsonl").write_text('{"id": "a", "samples": [{"correct": true}]}\n{"id": "b", "samples": [{"correct": false}]}\n')
    (broken / "report.json").write_text("{not json")
    with pytest.raises(RlvrError, match="report.json: not JSON"):
        compare_evaluations(base, broken)
    (broken / "samples.jsonl").write_bytes(b'{"id": "a", "samples": [{"correct": true}]}\n\xff\xfe\n')
    with pytest.raises(RlvrError, match=r"samples.jsonl:2: not UTF-8 text"):
        compare_evaluations(base, broken)
    (broken / "samples.jsonl").write_text('{"id": "a", "samples": [{"correct": true}]}\n[1]\n')
    with pytest.raises(RlvrError, match=r"samples.jsonl:2: each line must be a JSON object"):
        compare_evaluations(base, broken)
    twice = tmp_path / "twice"
    twice.mkdir()
    (twice / "samples.jsonl").write_text('{"id": "a", "samples": [{"correct": true}]}\n' * 2)
    with pytest.raises(RlvrError, match="appears twice"):
        compare_evaluations(twice, base)


def test_evaluations_drawn_with_other_seeds_are_pooled_problem_by_problem(tmp_path):
    b1 = _write_seeded(tmp_path / "b1", {"x": [True, False], "y": [False, False], "z": [False, False]}, 1, "base")
    b2 = _write_seeded(tmp_path / "b2", {"z": [False, False], "x": [True, True], "y": [False, False]}, 2, "base")
    a1 = _write_seeded(tmp_path / "a1", {"x": [True, True], "y": [True, False], "z": [False, False]}, 1, "trained")
    a2 = _write_seeded(tmp_path / "a2", {"x": [True, False], "y": [False, False], "z": [False, True]}, 2, "trained")
    c = compare_evaluations([b1, b2], [a1, a2])
    # x: 3/4 -> 3/4, y: 0/4 -> 1/4, z: 0/4 -> 1/4
    assert (c["before"], c["after"], c["change"]) == pytest.approx((0.75 / 3, 1.25 / 3, 0.5 / 3))
    assert (c["better"], c["worse"], c["same"]) == (2, 0, 1)
    assert c["samples_per_prompt"] == {"before": 4, "after": 4} and c["models"] == {"before": "base", "after": "trained"}
    hand = paired_change(paired_sums([0.75, 0, 0], [0.75, 0.25, 0.25]))
    assert (c["p"], *c["ci95"]) == pytest.approx((hand["p"], *hand["ci95"]))
    assert "over 3 problems, 4 samples each)" in describe(c)
    # the pairs' order does not matter, and one side may have more evaluations than the other
    assert compare_evaluations([b2, b1], [a2, a1])["change"] == pytest.approx(c["change"])
    uneven = compare_evaluations([b1, b2], a1)
    assert uneven["samples_per_prompt"] == {"before": 4, "after": 2}
    assert "4 samples each before and 2 after" in describe(uneven)


def test_pooling_refuses_the_same_samples_twice_and_other_models(tmp_path):
    b1 = _write_seeded(tmp_path / "b1", {"x": [True], "y": [False]}, 1)
    a1 = _write_seeded(tmp_path / "a1", {"x": [True], "y": [True]}, 1)
    with pytest.raises(RlvrError, match="both sampled with eval.seed 1: the same samples twice"):
        compare_evaluations([b1, b1], a1)
    other_model = _write_seeded(tmp_path / "om", {"x": [True], "y": [False]}, 2, model="other")
    with pytest.raises(RlvrError, match="pooled before with .*its model is 'other', not 'm'"):
        compare_evaluations([b1, other_model], a1)
    hotter = _write_seeded(tmp_path / "hot", {"x": [True], "y": [False]}, 3, temperature=1.0)
    with pytest.raises(RlvrError, match="its temperature is 1.0, not 0.7"):
        compare_evaluations(a1, [a1, hotter])
    with pytest.raises(RlvrError, match="differ in temperature: 0.7 before, 1.0 after"):
        compare_evaluations(b1, hotter)
    fewer = _write_seeded(tmp_path / "fewer", {"x": [True]}, 4)
    with pytest.raises(RlvrError, match=r"b1 and .*fewer are evaluations of different problems \(2 and 1;"):
        compare_evaluations([b1, fewer], a1)


def test_points_never_read_minus_zero():
    c = paired_change(paired_sums([0.5, 0.0, 0.25, 0.0], [0.5, 0.0, 0.25, 0.0001]))
    assert "(+0.00 points, 95% CI " in describe(c) and "-0.00" not in describe(c)
    c = paired_change(paired_sums([0.0, 0.0, 0.0, 0.5], [0.0001, 0.0, 0.0, 0.5]))
    c["ci95"] = (-0.00001, c["ci95"][1])  # a bound a hair below zero
    assert "95% CI +0.00 to" in describe(c) and "-0.00" not in describe(c)
