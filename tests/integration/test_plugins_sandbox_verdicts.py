"""The sandbox's verdict cannot be faked: a candidate that exits, raises control-flow
exceptions, prints verdicts of its own, reads the expected outputs or skips asserts never passes;
every loop form of a test and every assert statement must really run (the resource attacks:
tests/integration/test_plugins_sandbox.py)."""

from __future__ import annotations

import secrets

import pytest

from rlvr_plugins import sandbox as sb
from helpers.attacks import FAKE_PASS_PROGRAMS, assert_no_pass, call, CORRECT, SQUARE_TESTS, WRONG, assert_clean


@pytest.mark.parametrize("name", sorted(FAKE_PASS_PROGRAMS))
def test_fake_pass_tricks_fail(box, name):
    program = FAKE_PASS_PROGRAMS[name]
    tests = SQUARE_TESTS
    if name == "patched_builtins":
        tests = ["assert abs(f(2) - 4) < 1e-9", "assert isinstance(f(3), int) and f(3) == 9",
                 "assert len([f(1)]) == 1 and f(1) == 1"]
    if name == "ptrace_and_proc_mem":
        tests = ["assert f(0) != []"]  # would pass if any other process were reachable
    result = call(box, program, tests=tests)
    assert_no_pass(result)
    partial = call(box, program, tests=tests, partial=True)
    assert partial.passed == 0 and not partial.ok, partial
    assert_clean(box)


def test_fake_pass_tricks_fail_in_io_mode(box):
    expected = "s3cr3t-" + secrets.token_hex(8)
    for name in ("os_exit_at_load", "sys_exit_at_load", "print_fake_verdicts", "close_all_fds", "atexit_tricks"):
        result = box.run(sb.Job(program=FAKE_PASS_PROGRAMS[name], mode="io", cases=[("", expected)]))
        assert_no_pass(result)


def test_expected_outputs_are_not_in_candidate_memory(box):
    """The tests and expected outputs never reach the candidate's process: scanning
    its whole address space (and the gc heap) does not find them."""
    expected = "s3cr3t-" + secrets.token_hex(8)
    # The candidate inherits the jail's non-dumpable state, which leaves its own /proc/self/mem
    # to host root; it may make itself dumpable again to read it (it is its own memory).
    scan = (
        "import ctypes, gc, re\n"
        "ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE\n"
        "PATTERN = re.compile(rb's3cr3t-[0-9a-f]{16}')\n"
        "def scan():\n"
        "    for obj in gc.get_objects():\n"
        "        for item in (obj.values() if type(obj) is dict else obj if type(obj) in (list, tuple) else ()):\n"
        "            if type(item) is str and PATTERN.search(item.encode()):\n"
        "                return PATTERN.search(item.encode()).group().decode()\n"
        "    scanned = 0\n"
        "    with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:\n"
        "        for line in maps:\n"
        "            span, perms = line.split()[:2]\n"
        "            if 'r' not in perms:\n"
        "                continue\n"
        "            lo, hi = (int(v, 16) for v in span.split('-'))\n"
        "            try:\n"
        "                mem.seek(lo)\n"
        "                found = PATTERN.search(mem.read(hi - lo))\n"
        "            except (OSError, ValueError, OverflowError):\n"
        "                continue\n"
        "            scanned += hi - lo\n"
        "            if found:\n"
        "                return found.group().decode()\n"
        "    return 'not found' if scanned > 1 << 20 else 'not scanned'\n"
    )
    io = box.run(sb.Job(program=scan + "print(scan())\n", mode="io", cases=[("", expected)]))
    assert io.status == "failed" and "not found" in io.message, io
    result = call(box, scan + "def f(x):\n    return scan()\n", tests=[f"assert f(0) == {expected!r}"])
    assert result.status == "failed", result
    assert_clean(box)


# -- steering the tests' control flow ----------------------------------------------------

# Test forms that loop over the candidate's answers. With StopIteration raised through
# the proxy, map/filter end early (all() of a short map is True) and a zip-loop's body
# never runs; each must still fail, and a correct program must still pass each one.
LOOP_FORMS = {
    "all_map": "assert all(map(lambda t: f(t[0]) == t[1], [(2, 4), (3, 9), (-4, 16)]))\n",
    "zip_map_loop": "for got, want in zip(map(f, [2, 3, -4]), [4, 9, 16]):\n    assert got == want\n",
    "filter": "assert not list(filter(lambda x: f(x) != x * x, [2, 3, -4]))\n",
    "iter_sentinel": "calls = iter([2, 3, -4])\nassert sorted(iter(lambda: f(next(calls)), -1)) == [4, 9, 16]\n",
    "generator_expression": "assert all(f(x) == x * x for x in [2, 3, -4])\n",
    "generator_function": "def squares():\n    for x in [2, 3, -4]:\n        yield f(x)\nassert list(squares()) == [4, 9, 16]\n",
    "for_loop": "for x in [2, 3, -4]:\n    assert f(x) == x * x\n",
}
CONTROL_FLOW_RAISES = {  # what the candidate runs: the exception the verdict names (None: the candidate died)
    "StopIteration": ("raise StopIteration", "StopIteration"),
    "StopAsyncIteration": ("raise StopAsyncIteration", "StopAsyncIteration"),
    "GeneratorExit": ("raise GeneratorExit", "GeneratorExit"),
    "KeyboardInterrupt": ("raise KeyboardInterrupt", "KeyboardInterrupt"),
    "SystemExit(0)": ("raise SystemExit(0)", "SystemExit"),
    "sys.exit(0)": ("import sys; sys.exit(0)", "SystemExit"),
    "os._exit(0)": ("import os; os._exit(0)", None),
}


def control_flow_program(statement: str, at: int) -> str:
    """Squares correctly, except that it runs ``statement`` when called with ``at``."""
    return f"def f(x):\n    if x == {at}:\n        {statement}\n    return x * x\n"


def test_correct_program_passes_every_loop_form(box):
    results = box.run_many([sb.Job(program=CORRECT, tests=[form], timeout=5.0) for form in LOOP_FORMS.values()])
    assert [r.status for r in results] == ["passed"] * len(LOOP_FORMS), results
    wrong = box.run_many([sb.Job(program=WRONG, tests=[form], timeout=5.0) for form in LOOP_FORMS.values()])
    assert all(r.status == "failed" for r in wrong), wrong


@pytest.mark.parametrize("raised", sorted(CONTROL_FLOW_RAISES))
def test_control_flow_exceptions_from_the_candidate_fail_every_loop_form(box, raised):
    statement, name = CONTROL_FLOW_RAISES[raised]
    for at in (2, 3):  # on the first call, and on the second after a right answer
        program = control_flow_program(statement, at)
        for partial in (False, True):
            jobs = [sb.Job(program=program, tests=[form], timeout=5.0, partial=partial) for form in LOOP_FORMS.values()]
            for form, result in zip(LOOP_FORMS, box.run_many(jobs)):
                where = (raised, at, partial, form, result)
                assert_no_pass(result)
                assert result.passed < result.total, where
                if name is None:
                    assert result.status == "crashed", where
                else:
                    assert result.status == "failed", where
                    assert result.message.startswith(f"the candidate raised {name}"), where
    assert_clean(box)


def test_a_control_flow_exception_is_a_failure_even_when_the_test_catches_it(box):
    program = control_flow_program("raise StopIteration", 3)
    tests = ["try:\n    f(3)\nexcept BaseException:\n    pass\nassert f(2) == 4\n"]
    result = call(box, program, tests=tests)
    assert result.status == "failed" and "the candidate raised StopIteration" in result.message, result
    partial = call(box, program, tests=tests, partial=True)
    assert (partial.status, partial.passed, partial.total) == ("failed", 1, 2), partial
    # counted once, not again by the assert it escaped through
    partial = call(box, program, tests=SQUARE_TESTS, partial=True)
    assert (partial.status, partial.passed, partial.total) == ("failed", 2, 3), partial
    # a plain exception the test chooses to swallow is the test's business
    plain = call(box, control_flow_program("raise ValueError", 3), tests=tests)
    assert plain.ok, plain


def test_every_assert_statement_must_run(box):
    cases = {
        "for x in []:\n    assert f(x) == x * x\n": "0 of 1 asserts ran",
        "def check(candidate):\n    assert candidate(2) == 4\n": "0 of 1 asserts ran",  # never called
        "if f(2) == 5:\n    assert f(3) == 9\nassert f(2) == 4\n": "1 of 2 asserts ran",
        "for x in [2, 3]:\n    assert f(x) == x * x\nwhile False:\n    assert f(0) == 0\n": "1 of 2 asserts ran",
    }
    for tests, message in cases.items():
        result = call(box, CORRECT, tests=[tests])
        assert (result.status, result.message) == ("failed", message), (tests, result)
        partial = call(box, CORRECT, tests=[tests], partial=True)
        assert partial.status == "failed" and partial.passed < partial.total, (tests, partial)
    partial = call(box, CORRECT, tests=["for x in [2, 3]:\n    assert f(x) == x * x\nif False:\n    assert f(0) == 0\n"],
                   partial=True)
    assert (partial.passed, partial.total) == (2, 3), partial  # the statement that never ran is one failure
    # a statement that runs many times counts once towards "ran"; asserts of called functions count
    ran = call(box, CORRECT, tests=["def check(candidate):\n    for x in range(5):\n        assert candidate(x) == x * x\n",
                                    "check(f)\n"])
    assert ran.ok and (ran.passed, ran.total) == (5, 5), ran


def test_tests_without_a_counted_assert_are_invalid(box):
    for tests in (["f(2)"], ["assert True", "f(3)"], ["x = f(2)\nif x != 4:\n    raise ValueError(x)\n"]):
        result = call(box, CORRECT, tests=tests)
        assert result.status == "invalid_test" and "no assert" in result.message, (tests, result)
