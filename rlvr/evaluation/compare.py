"""Is a change in held-out accuracy more than noise? Two evaluations of the same problems, compared
problem by problem.

A small model's accuracy on a few hundred problems moves by chance: a greedy 1.4% on 1319 problems
is 19 of them, and a retrained model may solve 24 others and lose 17. A paired comparison asks the
question per problem. With ``b`` and ``a`` a problem's pass rates (passing samples over samples)
before and after, and ``d = a - b``:

- the change is ``mean(d)``, with a 95% interval ``mean(d) ± 1.96 · sd(d) / √n`` (normal
  approximation, sound for the hundreds of problems an evaluation has);
- its p-value is two-sided, from ``z = mean(d) / (sd(d) / √n)``;
- problems ``better`` (d > 0) and ``worse`` (d < 0) also give an exact sign test: under "no
  change" each changed problem is better or worse with probability 1/2. With one sample a
  problem it is McNemar's exact test.

Everything here is a function of sums (n, Σd, Σd², better, worse), so ranks can add theirs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

from rlvr import RlvrError


def paired_sums(before: Sequence[float], after: Sequence[float]) -> dict[str, float]:
    """The sums ``paired_change`` needs, from per-problem pass rates in the same problem order."""
    if len(before) != len(after):
        raise ValueError(f"paired rates need the same problems: {len(before)} before, {len(after)} after")
    d = [a - b for b, a in zip(before, after)]
    return {"n": len(d), "before": float(sum(before)), "after": float(sum(after)), "d": float(sum(d)),
            "d2": float(sum(x * x for x in d)), "better": sum(x > 0 for x in d), "worse": sum(x < 0 for x in d)}


def sign_test_p(better: int, worse: int) -> float:
    """Two-sided exact binomial p-value of ``better`` against ``worse`` with p = 1/2 (ties left out)."""
    m = better + worse
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, i) for i in range(min(better, worse) + 1))
    return min(1.0, 2 * tail / 2**m)


def paired_change(sums: dict[str, float]) -> dict[str, float]:
    """Accuracy before and after, their difference with a 95% interval and p-value, and the sign
    test, from ``paired_sums`` (or its figures summed over ranks)."""
    n = int(sums["n"])
    if n == 0:
        raise ValueError("no problems to compare")
    mean = sums["d"] / n
    var = (sums["d2"] - n * mean * mean) / (n - 1) if n > 1 else 0.0
    se = math.sqrt(max(var, 0.0) / n)
    if se > 0:
        p = math.erfc(abs(mean) / se / math.sqrt(2))
    else:  # every problem moved by the same amount
        p = 1.0 if mean == 0 else 0.0
    better, worse = int(sums["better"]), int(sums["worse"])
    return {"n": n, "before": sums["before"] / n, "after": sums["after"] / n, "change": mean,
            "ci95": (mean - 1.96 * se, mean + 1.96 * se), "p": p,
            "better": better, "worse": worse, "same": n - better - worse, "sign_test_p": sign_test_p(better, worse)}


def describe(c: dict) -> str:
    """One line: ``pass@1 1.4% -> 2.0% (+0.5 points, 95% CI -0.1 to +1.2, p = 0.12; ...)``."""
    lo, hi = c["ci95"]
    verdict = "beyond noise" if c["p"] < 0.05 and c["sign_test_p"] < 0.05 else "within noise"
    return (f"pass@1 {100 * c['before']:.1f}% -> {100 * c['after']:.1f}% ({100 * c['change']:+.1f} points, "
            f"95% CI {100 * lo:+.1f} to {100 * hi:+.1f}, p = {c['p']:.2g}; {c['better']} problems better, "
            f"{c['worse']} worse, sign test p = {c['sign_test_p']:.2g}: {verdict}, over {c['n']} problems)")


def _samples_path(path: Path) -> Path:
    if path.is_dir():
        path = path / "samples.jsonl"
    if not path.is_file():
        raise RlvrError(f"{path}: not found (give an `rlvr eval --output-dir` folder or its samples.jsonl)")
    return path


def read_pass_rates(path: Path) -> tuple[dict[str, float], dict]:
    """Each problem's pass rate from an ``rlvr eval`` output (its folder or ``samples.jsonl``),
    keyed by the problem's id (its line number where the task has none), and the folder's
    ``report.json`` (empty when absent)."""
    samples = _samples_path(Path(path))
    rates: dict[str, float] = {}
    with open(samples) as f:
        for line_no, line in enumerate(f, 1):
            try:
                record = json.loads(line)
                passed = [bool(s["correct"]) for s in record["samples"]]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise RlvrError(f"{samples}:{line_no}: not an rlvr eval sample record ({exc})") from None
            if not passed:
                raise RlvrError(f"{samples}:{line_no}: a problem with no samples")
            key = str(record["id"]) if record.get("id") is not None else f"#{line_no}"
            if key in rates:
                raise RlvrError(f"{samples}:{line_no}: problem {key!r} appears twice")
            rates[key] = sum(passed) / len(passed)
    if not rates:
        raise RlvrError(f"{samples}: no problems")
    report_path = samples.parent / "report.json"
    try:
        report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    except json.JSONDecodeError as exc:
        raise RlvrError(f"{report_path}: not JSON ({exc})") from None
    if not isinstance(report, dict):
        raise RlvrError(f"{report_path}: not an rlvr eval report (a JSON object)")
    return rates, report


def compare_evaluations(before: Path, after: Path) -> dict:
    """``rlvr compare``: the paired change from one ``rlvr eval`` output to another. Both must have
    evaluated the same problems of the same task and split."""
    rates_b, report_b = read_pass_rates(before)
    rates_a, report_a = read_pass_rates(after)
    for key in ("task", "split"):
        if key in report_b and key in report_a and report_b[key] != report_a[key]:
            raise RlvrError(f"the evaluations differ in {key}: {report_b[key]!r} before, {report_a[key]!r} after")
    if rates_b.keys() != rates_a.keys():
        only_b, only_a = len(rates_b.keys() - rates_a.keys()), len(rates_a.keys() - rates_b.keys())
        raise RlvrError(f"the evaluations are of different problems ({len(rates_b)} before, {len(rates_a)} after; "
                        f"{only_b} only before, {only_a} only after): evaluate both with the same --limit")
    keys = list(rates_b)
    result = paired_change(paired_sums([rates_b[k] for k in keys], [rates_a[k] for k in keys]))
    result["samples_per_prompt"] = {"before": report_b.get("samples_per_prompt"),
                                    "after": report_a.get("samples_per_prompt")}
    result["models"] = {"before": report_b.get("model"), "after": report_a.get("model")}
    return result

