"""The ``code`` reward: run model-written Python against tests inside the sandbox.

A record is scored by the first of these test forms it carries:

- ``io_tests``: stdin/stdout cases, a list of ``{"input": str, "output": str}``
  (or ``{"inputs": [...], "outputs": [...]}``, or the same as a JSON string). The
  program runs once per case as ``__main__``; the stripped output (line endings
  and trailing spaces normalised) must equal the expected one and the exit code
  be 0.
- ``test_list`` (MBPP): assert statements that name the program's functions, with
  optional ``test_setup_code`` (run before the program and before the tests).
- ``test`` with ``entry_point`` (HumanEval): the program is ``prompt + completion``,
  or the completion alone when it already defines ``def <entry_point>`` at top
  level (then the prompt's imports are put before it); the test's
  ``check(candidate)`` is called with the candidate's function.
- ``test`` alone: assert code that names the program's functions.

Each record is read on its own, so one batch may mix HumanEval, MBPP and stdin/stdout records
(a column a record lacks is ``None`` for it).

Markdown fences are stripped from completions. The value is 1.0 when every test
passes -- every assert statement ran at least once and none failed -- else 0.0;
with ``partial=True`` it is the fraction of asserts (or io cases) that passed, an
assert statement that never ran counting as one failed. ``None`` when the record has no tests or its tests are
themselves broken. ``reward_info`` says the isolation level used, the verdict,
the first failure (control characters escaped) and the run time (wall seconds
measured on the host, also when the program took its sandbox worker down). See
``rlvr_plugins.sandbox`` for what the sandbox protects against;
``isolation="process"`` must be chosen explicitly, and logs a warning saying
what it leaves open.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Annotated, Any

from annotated_types import Ge, Gt, Le

from rlvr import RlvrError, Score, hookimpl
from rlvr.kit import completion_text

from .sandbox import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT, ISOLATION_LEVELS, Isolation, Job, Result, get_sandbox

__all__ = ["code_reward", "extract_code", "rlvr_register_rewards"]



@hookimpl
def rlvr_register_rewards(register: Any) -> None:
    register(
        "code",
        code_reward,
        description="Python code run against HumanEval/MBPP asserts or stdin/stdout cases in a bubblewrap sandbox; "
        "1.0 if all tests pass (partial=True: fraction passed)",
        gold=("test", "test_list", "io_tests"),  # the prompt may show `prompt`, `entry_point`, setup code
    )


def code_reward(
    prompts: list[Any],
    completions: list[Any],
    completion_ids: list[Any],
    *,
    prompt: list[Any] | None = None,
    test: list[Any] | None = None,
    entry_point: list[Any] | None = None,
    test_list: list[Any] | None = None,
    test_setup_code: list[Any] | None = None,
    io_tests: list[Any] | None = None,
    timeout: Annotated[float, Gt(0), Le(3600)] = DEFAULT_TIMEOUT,
    memory_mb: Annotated[int, Ge(64)] = DEFAULT_MEMORY_MB,
    isolation: Isolation = "bwrap",
    partial: bool = False,
) -> list[Score]:
    if isolation not in ISOLATION_LEVELS:
        raise RlvrError(f"code reward: isolation must be one of {', '.join(ISOLATION_LEVELS)}, not {isolation!r}")
    try:
        timeout = float(timeout)
        memory_mb = int(memory_mb)
    except (TypeError, ValueError):
        raise RlvrError("code reward: timeout must be a number of seconds and memory_mb an integer") from None
    if not 0 < timeout <= 3600:
        raise RlvrError(f"code reward: timeout must be in (0, 3600] seconds, not {timeout}")
    if memory_mb < 64:
        raise RlvrError(f"code reward: memory_mb must be at least 64, not {memory_mb}")

    scores: list[Score | None] = [None] * len(completions)
    pending: list[tuple[int, str, Job]] = []
    for i, completion in enumerate(completions):
        try:
            made = _make_job(
                completion=completion_text(completion),
                # The record's own ``prompt`` column (HumanEval's code prompt), else the prompt it was
                # sampled from: per record, since a batch may mix records with and without one.
                prompt_text=_first_present(_at(prompt, i), _at(prompts, i)),
                test=_at(test, i),
                entry_point=_at(entry_point, i),
                test_list=_at(test_list, i),
                setup=_at(test_setup_code, i),
                io_tests=_at(io_tests, i),
            )
        except _Unscorable as e:
            scores[i] = Score(None, {"verdict": "invalid_test", "message": str(e), "isolation": isolation})
            continue
        if made is None:
            scores[i] = Score(None, {"verdict": "no_tests", "isolation": isolation})
            continue
        form, job = made
        job.partial, job.timeout, job.memory_mb = bool(partial), timeout, memory_mb
        pending.append((i, form, job))
    if pending:
        sandbox = get_sandbox(isolation)
        results = sandbox.run_many([job for _, _, job in pending])
        for (i, form, _), result in zip(pending, results):
            scores[i] = _score(result, form, bool(partial), sandbox.limits)
    return scores  # type: ignore[return-value]


def _score(result: Result, form: str, partial: bool, limits: str) -> Score:
    info = {
        "verdict": result.status,
        "isolation": result.isolation,
        "limits": limits,
        "format": form,
        "passed": result.passed,
        "total": result.total,
        "seconds": result.elapsed,
    }
    if result.message:
        info["message"] = result.message
    if result.status in ("invalid_test", "sandbox_error"):
        return Score(None, info)  # nothing the candidate did: cannot score
    if result.ok:
        value = 1.0
    elif partial and result.total > 0:
        value = result.passed / result.total
    else:
        value = 0.0
    return Score(value, info)


class _Unscorable(Exception):
    """The record's tests are malformed."""


def _first_present(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _at(column: Any, i: int) -> Any:
    if column is None:
        return None
    try:
        return column[i]
    except (IndexError, KeyError, TypeError):
        return None


_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^[ \t]*```|\Z)", re.S | re.M)
_PYTHON_TAGS = {"python", "py", "python3", "py3", ""}


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The code in a completion: the body of its Python fence (the one defining
    ``entry_point`` if given, else the longest), or the text itself if unfenced.
    An unclosed fence (generation cut off) runs to the end."""
    blocks = [_tag_on_next_line(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    if not blocks:
        return text
    python = [body for lang, body in blocks if lang in _PYTHON_TAGS] or [body for _, body in blocks]
    if entry_point:
        for body in python:
            if _defines(body, entry_point):
                return body
    return max(python, key=len)


_TAG_LINE = re.compile(r"[ \t]*(python3?|py3?)[ \t]*\n")


def _tag_on_next_line(lang: str, body: str) -> tuple[str, str]:
    """A fence opened bare with its language on the line below (````\npython\n...``, as a
    model writes after a prompt that shows code in a bare fence): the tag, not a line of code
    (run, it would be a NameError)."""
    tagged = _TAG_LINE.match(body) if not lang else None
    return (tagged.group(1), body[tagged.end():]) if tagged else (lang, body)


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(", code, re.M) is not None


def _compiles(code: str) -> bool:
    try:
        compile(code, "<prompt>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
        return False
    return True


def _imports_of(code: str) -> str:
    """The top-level import statements of ``code`` (e.g. ``from typing import List``)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    lines = [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    return "".join(line + "\n" for line in lines)


def _as_list(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _make_job(*, completion: str, prompt_text: Any, test: Any, entry_point: Any, test_list: Any,
              setup: Any, io_tests: Any) -> tuple[str, Job] | None:
    setup = setup if isinstance(setup, str) else ""
    io_tests = _as_list(io_tests)
    if io_tests:
        return "io", Job(program=extract_code(completion), mode="io", cases=_io_cases(io_tests))
    test_list = _as_list(test_list)
    if test_list:
        if isinstance(test_list, str):
            test_list = [test_list]
        if not isinstance(test_list, (list, tuple)) or not all(isinstance(t, str) for t in test_list):
            raise _Unscorable("test_list must be a list of assert strings")
        code = extract_code(completion)
        program = f"{setup}\n{code}" if setup else code
        return "mbpp", Job(program=program, tests=list(test_list), trusted=setup)
    if isinstance(test, str) and test.strip():
        if isinstance(entry_point, str) and entry_point:
            if not entry_point.isidentifier():
                raise _Unscorable(f"entry_point {entry_point!r} is not a Python name")
            prompt_text = prompt_text if isinstance(prompt_text, str) else ""
            code = extract_code(completion, entry_point)
            if _defines(code, entry_point):
                program = _imports_of(prompt_text) + code
            else:
                program = prompt_text + code
            # The tester runs the prompt itself (for helpers its tests call, such as
            # HumanEval/32's poly) when the prompt is code on its own.
            trusted = prompt_text if _compiles(prompt_text) else ""
            tests = [f"{test}\n\ncheck({entry_point})\n"]
            return "humaneval", Job(program=program, tests=tests, trusted=trusted, entry_point=entry_point)
        if re.search(r"^def[ \t]+check[ \t]*\(", test, re.M):
            raise _Unscorable("the test defines check() but the record has no entry_point to call it with")
        code = extract_code(completion)
        program = f"{setup}\n{code}" if setup else code
        return "assert", Job(program=program, tests=[test], trusted=setup)
    return None


def _io_cases(io_tests: Any) -> list[tuple[str, str]]:
    if isinstance(io_tests, dict) and "inputs" in io_tests and "outputs" in io_tests:
        pairs = list(zip(io_tests["inputs"], io_tests["outputs"]))
    elif isinstance(io_tests, (list, tuple)) and all(isinstance(c, dict) for c in io_tests):
        pairs = [(c.get("input", ""), c.get("output")) for c in io_tests]
    else:
        raise _Unscorable('io_tests must be a list of {"input": ..., "output": ...}')
    cases = []
    for stdin, expected in pairs:
        if expected is None:
            raise _Unscorable("an io test has no expected output")
        cases.append((_text(stdin), _text(expected)))
    return cases


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return "\n".join(map(str, value))
    return str(value)
