"""Is a change in held-out accuracy more than noise? Two evaluations of the same problems, compared
problem by problem.

A small model's accuracy on a few hundred problems moves by chance: a greedy 1.4% on 1319 problems
is 19 of them, and a retrained model may solve 24 others and lose 17. A paired comparison asks the
question per problem. With ``b`` and ``a`` a problem's pass rates (passing samples over samples)
before and after, and ``d = a - b``:

- the change is ``mean(d)``, with a 95% interval for the difference of paired proportions that
  stays within the possible range (Newcombe 1998, method 10: the Wilson score interval of each
  accuracy, combined through the correlation of the before and after rates over problems; with
  one sample a problem that correlation is the 2x2 table's phi). ``mean(d) ± 1.96 · sd(d) / √n``
  would read "+99 points, 95% CI +97.0 to +101.0" for 1% -> 100%;
- its p-value is two-sided, from ``z = mean(d) / (sd(d) / √n)``;
- problems ``better`` (d > 0) and ``worse`` (d < 0) also give an exact sign test: under "no
  change" each changed problem is better or worse with probability 1/2. With one sample a
  problem it is McNemar's exact test.

Everything here is a function of sums (n, Σb, Σa, Σb², Σa², Σd², better, worse), so ranks can
add theirs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

from rlvr import RlvrError
from rlvr.kit.data import numbered_jsonl, parse_json


def paired_sums(before: Sequence[float], after: Sequence[float]) -> dict[str, float]:
    """The sums ``paired_change`` needs, from per-problem pass rates in the same problem order."""
    if len(before) != len(after):
        raise ValueError(f"paired rates need the same problems: {len(before)} before, {len(after)} after")
    d = [a - b for b, a in zip(before, after)]
    return {"n": len(d), "before": float(sum(before)), "after": float(sum(after)), "d": float(sum(d)),
            "before2": float(sum(x * x for x in before)), "after2": float(sum(x * x for x in after)),
            "d2": float(sum(x * x for x in d)), "better": sum(x > 0 for x in d), "worse": sum(x < 0 for x in d)}


Z95 = 1.96


def wilson_interval(p: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a proportion ``p`` observed over ``n`` trials, within [0, 1]."""
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_interval(sums: dict[str, float], z: float = Z95) -> tuple[float, float]:
    """Newcombe's hybrid score interval (method 10) for ``after - before`` from ``paired_sums``:
    within [-1, 1] and never past what the two accuracies allow. The correlation of the per-problem
    rates is taken as 0 where either side does not vary."""
    n = int(sums["n"])
    pb, pa = sums["before"] / n, sums["after"] / n
    lb, ub = wilson_interval(pb, n, z)
    la, ua = wilson_interval(pa, n, z)
    var_b, var_a = sums["before2"] / n - pb * pb, sums["after2"] / n - pa * pa
    cross = (sums["before2"] + sums["after2"] - sums["d2"]) / 2 / n  # mean of b * a
    phi = (cross - pb * pa) / math.sqrt(var_b * var_a) if var_b > 1e-12 and var_a > 1e-12 else 0.0
    phi = min(1.0, max(-1.0, phi))
    change = pa - pb
    below = math.sqrt(max((pa - la) ** 2 - 2 * phi * (pa - la) * (ub - pb) + (ub - pb) ** 2, 0.0))
    above = math.sqrt(max((ua - pa) ** 2 - 2 * phi * (ua - pa) * (pb - lb) + (pb - lb) ** 2, 0.0))
    return max(-1.0, change - below), min(1.0, change + above)


def sign_test_p(better: int, worse: int) -> float:
    """Two-sided exact binomial p-value of ``better`` against ``worse`` with p = 1/2 (ties left out)."""
    m = better + worse
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, i) for i in range(min(better, worse) + 1))
    return min(1.0, 2 * tail / 2**m)


def paired_change(sums: dict[str, float]) -> dict[str, float]:
    """Accuracy before and after, their difference with a 95% interval (``paired_interval``) and
    p-value, and the sign test, from ``paired_sums`` (or its figures summed over ranks)."""
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
            "ci95": paired_interval(sums), "p": p,
            "better": better, "worse": worse, "same": n - better - worse, "sign_test_p": sign_test_p(better, worse)}


def describe(c: dict) -> str:
    """One line: ``pass@1 1.44% -> 1.97% (+0.53 points, 95% CI -0.08 to +1.14, p = 0.09; ...)``."""
    lo, hi = c["ci95"]
    verdict = "beyond noise" if c["p"] < 0.05 and c["sign_test_p"] < 0.05 else "within noise"
    return (f"pass@1 {100 * c['before']:.2f}% -> {100 * c['after']:.2f}% ({_points(c['change'])} points, "
            f"95% CI {_points(lo)} to {_points(hi)}, p = {c['p']:.2g}; {counted(c['better'], 'problem')} better, "
            f"{c['worse']} worse, sign test p = {c['sign_test_p']:.2g}: {verdict}, over {counted(c['n'], 'problem')}"
            f"{_samples(c)})")


def percent(fraction: float) -> str:
    """An accuracy as people read it, the one format of every line and table: ``12.5%``."""
    return f"{100 * fraction:.1f}%"


def counted(n: int, thing: str) -> str:
    """``1 problem``, ``2 problems``."""
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"


def _points(fraction: float) -> str:
    """Percentage points, signed, two decimals; never "-0.00"."""
    text = f"{100 * fraction:+.2f}"
    return "+0.00" if text == "-0.00" else text


def _samples(c: dict) -> str:
    spp = c.get("samples_per_prompt") or {}
    b, a = spp.get("before"), spp.get("after")
    if not b or not a:
        return ""
    return f", {counted(b, 'sample')} each" if b == a else f", {counted(b, 'sample')} each before and {a} after"


def _samples_path(path: Path) -> Path:
    if path.is_dir():
        path = path / "samples.jsonl"
    if not path.is_file():
        raise RlvrError(f"{path}: not found (give an `rlvr eval --output-dir` folder or its samples.jsonl)")
    return path


def read_counts(path: Path) -> tuple[dict[str, tuple[int, int]], dict]:
    """Each problem's (passing samples, samples) from an ``rlvr eval`` output (its folder or
    ``samples.jsonl``), keyed by the problem's id (its line number where the task has none), and
    the folder's ``report.json`` (empty when absent)."""
    samples = _samples_path(Path(path))
    counts: dict[str, tuple[int, int]] = {}
    for line_no, record in numbered_jsonl(samples):  # bad bytes, bad JSON: its one-line errors
        try:
            passed = [bool(s["correct"]) for s in record["samples"]]
        except (KeyError, TypeError) as exc:
            raise RlvrError(f"{samples}:{line_no}: not an rlvr eval sample record ({exc})") from None
        if not passed:
            raise RlvrError(f"{samples}:{line_no}: a problem with no samples")
        key = str(record["id"]) if record.get("id") is not None else f"#{line_no}"
        if key in counts:
            raise RlvrError(f"{samples}:{line_no}: problem {key!r} appears twice")
        counts[key] = (sum(passed), len(passed))
    if not counts:
        raise RlvrError(f"{samples}: no problems")
    report_path = samples.parent / "report.json"
    try:
        report = parse_json(report_path.read_text()) if report_path.is_file() else {}
    except json.JSONDecodeError as exc:
        raise RlvrError(f"{report_path}: not JSON ({exc})") from None
    if not isinstance(report, dict):
        raise RlvrError(f"{report_path}: not an rlvr eval report (a JSON object)")
    return counts, report


def _same_problems(counts: dict, other: dict, first: str, second: str) -> None:
    if counts.keys() != other.keys():
        only_1, only_2 = len(counts.keys() - other.keys()), len(other.keys() - counts.keys())
        raise RlvrError(f"{first} and {second} are evaluations of different problems ({len(counts)} and "
                        f"{len(other)}; {only_1} only in the first, {only_2} only in the second): evaluate all "
                        f"with the same --limit")


def pooled_pass_rates(paths: Sequence[Path], side: str) -> tuple[dict[str, float], dict]:
    """Each problem's pass rate over all its samples in ``paths``: evaluations of one model, each
    drawn with its own ``eval.seed`` (the same seed twice would count the same samples twice).
    Returns the rates and the report of the first, with ``samples_per_prompt`` summed."""
    read = [(Path(p), *read_counts(p)) for p in paths]
    first_path, counts, report = read[0]
    pooled = dict(counts)
    seeds = {report.get("seed"): first_path} if "seed" in report else {}
    for path, more, more_report in read[1:]:
        _same_problems(counts, more, str(first_path), str(path))
        for key in ("model", "temperature"):
            if key in report and key in more_report and report[key] != more_report[key]:
                raise RlvrError(f"{path}: pooled {side} with {first_path}, but its {key} is "
                                f"{more_report[key]!r}, not {report[key]!r}")
        seed = more_report.get("seed")
        if seed is not None and seed in seeds:
            raise RlvrError(f"{path} and {seeds[seed]} were both sampled with eval.seed {seed}: the same samples "
                            f"twice; evaluate again with another --set eval.seed=N to add samples")
        if seed is not None:
            seeds[seed] = path
        pooled = {k: (pooled[k][0] + more[k][0], pooled[k][1] + more[k][1]) for k in pooled}
    report = dict(report)
    if len(read) > 1:
        spp = [r.get("samples_per_prompt") for _, _, r in read]
        report["samples_per_prompt"] = sum(spp) if None not in spp else None
    return {k: passed / total for k, (passed, total) in pooled.items()}, report


def compare_evaluations(before: Path | Sequence[Path], after: Path | Sequence[Path]) -> dict:
    """``rlvr compare``: the paired change from one ``rlvr eval`` output to another. Both must have
    evaluated the same problems of the same task and split, at the same temperature. Either side
    may be several evaluations of its model with different ``eval.seed``: their samples are pooled."""
    sides = {}
    for side, paths in (("before", before), ("after", after)):
        paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
        sides[side] = pooled_pass_rates(paths, side)
    (rates_b, report_b), (rates_a, report_a) = sides["before"], sides["after"]
    for key in ("task", "split", "temperature"):
        if key in report_b and key in report_a and report_b[key] != report_a[key]:
            raise RlvrError(f"the evaluations differ in {key}: {report_b[key]!r} before, {report_a[key]!r} after")
    _same_problems(rates_b, rates_a, "before", "after")
    keys = list(rates_b)
    result = paired_change(paired_sums([rates_b[k] for k in keys], [rates_a[k] for k in keys]))
    result["samples_per_prompt"] = {"before": report_b.get("samples_per_prompt"),
                                    "after": report_a.get("samples_per_prompt")}
    result["models"] = {"before": report_b.get("model"), "after": report_a.get("model")}
    return result
