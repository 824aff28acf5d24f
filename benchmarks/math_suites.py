"""Other graders' own test cases, scored by rlvr's ``math`` reward and by plain math-verify.

A development measure, not a test: the cases are read at run time from the projects'
sources, which this script does not ship. Each source yields (gold, completion, expected)
triples as that project's tests assert them; a grader is counted right on a case when its
verdict equals the expectation. rlvr runs as ``math_reward(extract="auto")`` (completions
are free text); math-verify as ``verify(parse(gold), parse(completion))`` with its defaults.

Sources (each skipped with a note when absent):

- ``math-verify``: Math-Verify 0.9.0's suite, run case by case through
  ``tests/integration/test_plugins_math_conformance.py`` (there "math-verify" is its own test passing).
- ``skyrl-gym``: ``tests/test_aime.py`` and ``tests/test_gsm8k.py`` of the skyrl-gym 0.4.0
  sdist (their ``expected > 0`` means right).
- ``hendrycks``: ``modeling/math_equivalence_test.py`` of github.com/hendrycks/math.
- ``rllm``: ``tests/rewards/test_math_reward.py`` of github.com/rllm-org/rllm (the cases
  whose completion closes ``</think>`` and whose gold is set: the others test its format
  penalties and configuration, not answers).
- ``rlvr-table``: rlvr's own table (``tests/unit/test_plugins_math_reward.py``): not held out, shown
  for the categories it pins (false positives of math-verify among them).

``--fetch`` downloads the PyPI sdists (math-verify, skyrl-gym) into ``--cache``; the GitHub
files are read from git mirrors under ``--mirrors`` (``<owner>+<name>/repo``; default
``$RLVR_MIRRORS``), or from
``--cache/<owner>+<name>/<path>`` if placed there by hand. To score another version of the
reward (say the last commit's), put it first on the path as ``rlvr_plugins``::

    .venv/bin/python benchmarks/math_suites.py --fetch
    mkdir -p /tmp/old/rlvr_plugins && git archive HEAD:plugins __init__.py math | tar -x -C /tmp/old/rlvr_plugins
    PYTHONPATH=/tmp/old .venv/bin/python benchmarks/math_suites.py
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
try:
    import rlvr_plugins.math as mr
except ImportError:  # not installed: use the source tree
    sys.path.insert(0, str(ROOT))
    import plugins.math as mr

SDISTS = {"math-verify": "math-verify==0.9.0", "skyrl-gym": "skyrl-gym==0.4.0"}

Case = tuple[str, str, bool]  # gold, completion, expected verdict


# --------------------------------------------------------------------------- reading sources


def _sdist_dir(cache: Path, name: str, fetch: bool) -> Path | None:
    """The unpacked sdist of ``SDISTS[name]`` under ``cache``, downloaded first if asked."""
    spec = SDISTS[name]
    folder = cache / spec.replace("==", "-")
    if not folder.is_dir() and fetch:
        folder.mkdir(parents=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", spec,
                        "-d", str(folder)], check=True)
        (archive,) = folder.glob("*.tar.gz")
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():  # drop the top folder: <name>-<version>/...
                parts = Path(member.name).parts
                if len(parts) > 1 and ".." not in parts and not member.issym() and not member.islnk():
                    member.name = str(Path(*parts[1:]))
                    tar.extract(member, folder)
    return folder if folder.is_dir() else None


def _github_file(args, repo: str, path: str) -> str | None:
    owner_name = repo.replace("/", "+")
    placed = args.cache / owner_name / path
    if placed.is_file():
        return placed.read_text()
    git_dir = args.mirrors / owner_name / "repo" if args.mirrors else None
    if git_dir is not None and git_dir.is_dir():
        out = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"HEAD:{path}"], capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout
    return None


def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _parametrize_rows(source: str) -> list[tuple[list[str], list]]:
    """(argument names, rows) of every ``@pytest.mark.parametrize`` whose rows are literals."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "parametrize" and len(node.args) >= 2:
            names = _literal(node.args[0])
            rows = []
            for element in getattr(node.args[1], "elts", []):
                if isinstance(element, ast.Call) and getattr(element.func, "attr", None) == "param":
                    element = ast.Tuple(elts=element.args, ctx=ast.Load())
                value = _literal(element)
                if value is not None:
                    rows.append(value)
            if isinstance(names, str):
                found.append(([n.strip() for n in names.split(",")], rows))
    return found


def skyrl_cases(args) -> list[Case] | None:
    folder = _sdist_dir(args.cache, "skyrl-gym", args.fetch)
    if folder is None:
        return None
    cases = []
    for name in ("test_aime.py", "test_gsm8k.py"):
        for names, rows in _parametrize_rows((folder / "tests" / name).read_text()):
            if names[:3] == ["output", "ground_truth", "expected"]:
                cases += [(gold, output, expected > 0) for output, gold, expected in rows]
    return cases


def _test_functions(args, repo: str, path: str) -> list[ast.FunctionDef] | None:
    """The function definitions of a test file on GitHub, or None when it cannot be had."""
    source = _github_file(args, repo, path)
    if source is None:
        return None
    return [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)]


def hendrycks_cases(args) -> list[Case] | None:
    functions = _test_functions(args, "hendrycks/math", "modeling/math_equivalence_test.py")
    if functions is None:
        return None
    cases = []
    for function in functions:
        values = {t.id: _literal(n.value) for n in function.body if isinstance(n, ast.Assign)
                  for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("assertTrue", "assertFalse"):
                gold, pred = (values.get(a.id) for a in node.args[0].args)
                cases.append((gold, pred, node.func.attr == "assertTrue"))
    return cases


def rllm_cases(args) -> list[Case] | None:
    functions = _test_functions(args, "rllm-org/rllm", "tests/rewards/test_math_reward.py")
    if functions is None:
        return None
    cases = []
    for function in functions:
        response = gold = expected = None
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "model_response":
                response = _literal(node.value)
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if _literal(key) == "ground_truth":
                        gold = _literal(value)
                    if _literal(key) == "problem_type" and getattr(value, "attr", "MATH") != "MATH":
                        gold = None
            elif isinstance(node, ast.Assert):
                text = ast.unparse(node.test)
                expected = True if text == "output.is_correct is True" else False if text == "not output.is_correct" else expected
        if isinstance(response, str) and "</think>" in response and gold and expected is not None:
            for one in gold if isinstance(gold, list) else [gold]:
                if isinstance(one, str) and one.strip() and one.strip() != "\\boxed{}":
                    cases.append((one, response, expected))
                    break
    return cases


def table_cases(args) -> list[Case]:
    import test_plugins_math_reward as table

    return [(gold, table.completion_for(pred), equal) for gold, pred, equal in table.PAIRS]


# --------------------------------------------------------------------------- scoring


def rlvr_verdicts(cases: list[Case], timeout: float) -> list[bool]:
    scores = mr.math_reward(None, [c for _, c, _ in cases], None, answer=[g for g, _, _ in cases], extract="auto",
                            timeout=timeout)
    return [s.value == 1.0 for s in scores]


def math_verify_verdicts(cases: list[Case]) -> list[bool]:
    from math_verify import parse, verify

    out = []
    for gold, completion, _ in cases:
        try:
            out.append(bool(verify(parse(gold), parse(completion))))
        except Exception:  # noqa: BLE001 - counted as "not equal", as a training loop would
            out.append(False)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=ROOT / ".venv" / "math-suites")
    parser.add_argument("--mirrors", type=Path, default=os.environ.get("RLVR_MIRRORS"),
                        help="folder of git mirrors, <owner>+<name>/repo (default: $RLVR_MIRRORS; none: --cache only)")
    parser.add_argument("--fetch", action="store_true", help="download the PyPI sdists that are missing")
    parser.add_argument("--timeout", type=float, default=5.0, help="rlvr's per-sample limit (default 5)")
    parser.add_argument("--show", action="store_true", help="list the cases each grader gets wrong")
    args = parser.parse_args()
    import logging

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    print(f"rlvr: {mr.__file__}")
    print(f"{'source':12} {'cases':>5} {'math-verify':>12} {'rlvr':>6}")
    totals = [0, 0, 0]

    suite = _sdist_dir(args.cache, "math-verify", args.fetch)
    if suite is not None:
        import test_plugins_math_conformance as conformance

        run = conformance.run_suite(suite, timeout=args.timeout)
        n, mv, ours = len(run["cases"]), len(run["mv_pass"]), len(run["rlvr_pass"])
        print(f"{'math-verify':12} {n:5d} {mv:12d} {ours:6d}   (its own tests, run both ways)", flush=True)
        totals = [totals[0] + n, totals[1] + mv, totals[2] + ours]
        if args.show:
            by_id = {c.id: c for c in run["cases"]}
            for case_id in sorted(run["mv_pass"] - run["rlvr_pass"]):
                print("   rlvr wrong:", conformance._describe(by_id[case_id])[:300])
    else:
        print(f"{'math-verify':12}   (no sdist under {args.cache}: --fetch)")

    for name, reader in (("skyrl-gym", skyrl_cases), ("hendrycks", hendrycks_cases), ("rllm", rllm_cases),
                         ("rlvr-table", table_cases)):
        cases = reader(args)
        if not cases:
            print(f"{name:12}   (source not found: see --help)")
            continue
        ours, theirs = rlvr_verdicts(cases, args.timeout), math_verify_verdicts(cases)
        right = [sum(v == c[2] for v, c in zip(verdicts, cases)) for verdicts in (theirs, ours)]
        print(f"{name:12} {len(cases):5d} {right[0]:12d} {right[1]:6d}", flush=True)
        if name != "rlvr-table":
            totals = [totals[0] + len(cases), totals[1] + right[0], totals[2] + right[1]]
        if args.show:
            for label, verdicts in (("math-verify", theirs), ("rlvr", ours)):
                for verdict, (gold, completion, expected) in zip(verdicts, cases):
                    if verdict != expected:
                        print(f"   {label} wrong: expected {expected}: gold={gold!r} completion={completion[-160:]!r}")
    print(f"{'all but table':12} {totals[0]:5d} {totals[1]:12d} {totals[2]:6d}")


if __name__ == "__main__":
    main()
