"""The tester T: the test harness. Runs each job's (trusted) tests, asserts counted,
against proxies of the candidate's functions, decodes what comes back strictly, and
reports the verdict to the fork server on a socket no candidate ever holds.

What the candidate can do to the tests' control flow is raise, through a proxy, and
only as a builtin exception class of the tester's own (or ``CandidateError``). The
exceptions that mean something to the interpreter rather than report an error --
``StopIteration`` ends a ``map``/``zip``/``filter``/``iter(f, x)`` or a hand-written
iterator early, ``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit`` and
``StopAsyncIteration`` likewise -- are never raised into the tests as themselves: the
call is recorded as a failure there and then (a test that catches the exception cannot
undo it) and the tests stop (with partial credit, ``CandidateError`` is raised instead
and the other asserts still count). A verdict of "passed" also needs every counted
assert statement to have run at least once (``_AssertCounter``): a loop the candidate
ended early, or a ``check`` never called, is "failed: N of M asserts ran"; tests
without any counted assert are an invalid test, never a pass."""

from __future__ import annotations

import ast
import builtins
import json
import os
import socket
from typing import Any, NoReturn

from ..limits import TESTER_MEMORY_MB
from .cage import move_fds, null_stdio, set_rlimits
from .wire import Closed, Timeout, decode, encode, exception_text, recv, send, short


class _Abort(BaseException):
    """Stops all tests: timeout, candidate gone, or (without partial credit) a failure."""


class CandidateError(Exception):
    """The candidate raised an exception that is not a builtin one, or one that means
    control flow (``_CONTROL_FLOW``)."""


class _CountedCandidateError(CandidateError):
    """A ``CandidateError`` already recorded as a failure: no assert counts it again."""


_BUILTIN_EXCEPTIONS = {
    name: obj for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, Exception)
}
# Exceptions that steer the interpreter (an iterator's end, an exit): raised by the
# candidate, each is a failure of the call, never handed to the tests as itself.
_CONTROL_FLOW = frozenset({"StopIteration", "StopAsyncIteration", "GeneratorExit", "KeyboardInterrupt",
                           "SystemExit"})


class _Proxy:
    """Stands in for a candidate function inside the tester: every call is a round
    trip to the candidate process; what comes back is decoded into plain data."""

    def __init__(self, tester: _Tester, name: str) -> None:
        self._tester = tester
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tester.request({"call": self.__name__, "args": self._tester.encode(list(args)),
                                     "kwargs": self._tester.encode(kwargs)})

    def __repr__(self) -> str:
        return f"<sandboxed function {self.__name__}>"


_CODE_CACHE: dict[tuple[str, str], Any] = {}  # the tester sees the same tests for every sample of a prompt


def _cached(key: tuple[str, str], make: Any) -> Any:
    try:
        return _CODE_CACHE[key]
    except KeyError:
        pass
    value = make()
    if len(_CODE_CACHE) >= 512:
        _CODE_CACHE.pop(next(iter(_CODE_CACHE)))
    _CODE_CACHE[key] = value
    return value


def _compile_unit(text: str, index: int) -> tuple[Any, int, frozenset, frozenset]:
    """Compile test unit ``index`` with counted asserts; also the names it reads and binds."""
    filename = f"test_{index}.py"

    def make() -> tuple[Any, int, frozenset, frozenset]:
        tree = ast.parse(text, filename)
        loads, bound = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (loads if isinstance(node.ctx, ast.Load) else bound).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        counter = _AssertCounter(index)
        tree = ast.fix_missing_locations(counter.visit(tree))
        return compile(tree, filename, "exec"), counter.count, frozenset(loads), frozenset(bound)

    return _cached(("unit", filename + "\0" + text), make)


class _AssertCounter(ast.NodeTransformer):
    """Wraps each non-constant ``assert`` statement of test unit ``unit`` so that its
    passes and failures are counted, and which statements ran at all: each reports
    its own ``(unit, number)``."""

    def __init__(self, unit: int) -> None:
        self.unit = unit
        self.count = 0

    def visit_Assert(self, node: ast.Assert) -> Any:
        if isinstance(node.test, ast.Constant):
            return node  # ``assert True`` in HumanEval tests: not a check
        key = (self.unit, self.count)
        self.count += 1
        wrapped = ast.parse(
            "try:\n    pass\nexcept __rlvr_abort__:\n    raise\n"
            f"except BaseException as __rlvr_e__:\n    __rlvr_fail__({key}, {node.lineno}, __rlvr_e__)\n"
            f"else:\n    __rlvr_pass__({key})\n"
        ).body[0]
        for part in ast.walk(wrapped):  # report the assert's own line in tracebacks
            if hasattr(part, "lineno"):
                ast.copy_location(part, node)
        wrapped.body = [node]
        return wrapped


def tester_main(sock: socket.socket) -> None:
    """T: one job at a time from F -- the tests, and a socket to the candidate --
    one verdict back on the same socket, which no candidate ever holds."""
    null_stdio()
    sock = socket.socket(fileno=move_fds([sock.detach()])[0])
    set_rlimits(None, TESTER_MEMORY_MB, 256, None)
    while True:
        msg, fds, _flags, _addr = socket.recv_fds(sock, 16, 2)
        if not msg:
            return
        payload, chan = fds
        job = json.loads(os.pread(payload, os.fstat(payload).st_size, 0))
        os.close(payload)
        report = _Tester(job, chan, job["deadline"]).run()
        report["id"] = job["id"]
        sock.send(json.dumps(report).encode())
        os.close(chan)  # after the verdict: the candidate's exit is off the critical path


class _Tester:
    """T: runs the (trusted) tests against proxies of the candidate's functions and
    decides the verdict. Only this process's report counts."""

    def __init__(self, job: dict, chan: int, deadline: float) -> None:
        self.job = job
        self.chan = chan
        self.deadline = deadline
        self.partial = bool(job.get("partial"))
        self.passed = 0
        self.failed = 0
        self.ran: set[tuple[int, int]] = set()  # the counted assert statements that ran
        self.status = "failed"
        self.message = ""
        self.globals: dict[str, Any] = {}
        self.ref_names: dict[int, str] = {}

    # -- talking to the candidate

    def encode(self, value: Any) -> Any:
        return encode(value, lambda obj: self.ref_names.get(id(obj)))

    def request(self, message: dict) -> Any:
        try:
            send(self.chan, message)
            reply = recv(self.chan, self.deadline)
        except Timeout:
            self.abort("timeout", f"timed out after {self.job['timeout']} s")
        except (Closed, OSError) as e:
            self.abort("crashed", f"the candidate process ended during the tests ({e})")
        except (ValueError, RecursionError) as e:
            self.abort("error", f"unreadable reply from the candidate: {type(e).__name__}")
        if type(reply) is dict and len(reply) == 1:
            if "ok" in reply:
                try:
                    return decode(reply["ok"])
                except (ValueError, TypeError, RecursionError) as e:
                    raise CandidateError(f"unreadable return value: {e}") from None
            raised = reply.get("raise")
            if type(raised) is list and len(raised) == 2 and all(type(x) is str for x in raised):
                name, text = raised
                if name in _CONTROL_FLOW:
                    self.control_flow(name, text)
                cls = _BUILTIN_EXCEPTIONS.get(name)
                try:
                    exc = cls(text) if cls is not None else CandidateError(f"{name}: {text}")
                except Exception:
                    exc = CandidateError(f"{name}: {text}")
                raise exc
        self.abort("error", "malformed reply from the candidate")

    # -- bookkeeping; every failure counts, so a test that swallows _Abort still fails

    def record_failure(self, status: str, message: str) -> None:
        self.failed += 1
        if not self.message:
            self.status, self.message = status, short(message)

    def abort(self, status: str, message: str) -> NoReturn:
        self.record_failure(status, message)
        raise _Abort(message)

    def control_flow(self, name: str, text: str) -> NoReturn:
        """The candidate raised ``name`` (in ``_CONTROL_FLOW``): a failure, recorded
        now, whatever the test does with the exception."""
        message = f"the candidate raised {name}" + (f": {text}" if text else "")
        self.record_failure("failed", message)
        if not self.partial:
            raise _Abort(message)
        raise _CountedCandidateError(f"{name}: {text}")

    def _pass(self, key: tuple[int, int]) -> None:  # called by rewritten asserts
        self.ran.add(key)
        self.passed += 1

    def _fail(self, key: tuple[int, int], lineno: int, e: BaseException) -> None:  # called by rewritten asserts
        self.ran.add(key)
        if isinstance(e, AssertionError):
            text = f"assertion failed (line {lineno})" + (f": {e}" if str(e) else "")
        else:
            text = f"line {lineno}: {type(e).__name__}: {e}"
        if not isinstance(e, _CountedCandidateError):
            self.record_failure("failed", text)
        if not self.partial:
            raise _Abort(text)

    # -- the run

    def run(self) -> dict:
        job = self.job
        try:
            units, static_asserts, wanted = self._compile_tests(job["tests"])
        except Exception as e:
            return self._invalid(f"tests do not compile: {exception_text(e)}")
        if static_asserts == 0:
            return self._invalid("the tests have no assert statement (besides constant ones): nothing to pass")
        g = self.globals
        g.update({"__name__": "__rlvr_tests__", "__builtins__": builtins,
                  "__rlvr_abort__": _Abort, "__rlvr_pass__": self._pass, "__rlvr_fail__": self._fail})
        trusted = job.get("trusted") or ""
        if trusted:
            try:
                exec(_cached(("trusted", trusted), lambda: compile(trusted, "trusted.py", "exec")), g)
            except BaseException as e:
                return self._invalid(f"test setup failed: {exception_text(e)}")
        # Objects made by trusted code may be passed to the candidate by name.
        self.ref_names = {id(v): k for k, v in g.items() if not k.startswith("__")}
        try:
            self._connect(wanted)
            for code in units:
                try:
                    exec(code, g)
                except _Abort:
                    raise
                except BaseException as e:
                    if not isinstance(e, _CountedCandidateError):
                        self.record_failure("failed", f"{type(e).__name__}: {e}")
                    if not self.partial:
                        raise _Abort(str(e)) from None
        except _Abort:
            pass
        if self.failed == 0 and len(self.ran) == static_asserts:
            return {"status": "passed", "passed": self.passed, "total": self.passed, "message": ""}
        if self.failed == 0:  # only assert statements that never ran stand between this run and a pass
            self.status, self.message = "failed", f"{len(self.ran)} of {static_asserts} asserts ran"
            total = self.passed + static_asserts - len(self.ran)  # each counts as one failed assert
        else:
            total = max(self.passed + self.failed, static_asserts)
        return {"status": self.status, "passed": self.passed, "total": total, "message": self.message}

    def _invalid(self, message: str) -> dict:
        return {"status": "invalid_test", "passed": 0, "total": 0, "message": short(message)}

    def _connect(self, wanted: set[str]) -> None:
        """Wait for the program to load, then bind what the tests use of it."""
        try:
            hello = recv(self.chan, self.deadline)
        except Timeout:
            self.abort("timeout", f"the program did not load within {self.job['timeout']} s")
        except (Closed, ValueError, RecursionError, OSError):
            self.abort("crashed", "the program ended before the tests could run")
        if type(hello) is dict and len(hello) == 1 and "load_error" in hello:
            self.abort("error", f"the program failed to load: {hello['load_error']}")
        exports = hello.get("ready") if type(hello) is dict and len(hello) == 1 else None
        if type(exports) is not dict:
            self.abort("error", "malformed message from the candidate")
        self._bind(exports, wanted)

    def _compile_tests(self, tests: list[str]) -> tuple[list[Any], int, set[str]]:
        units = []
        count = 0
        loads: set[str] = set()
        bound: set[str] = set()
        for index, text in enumerate(tests):
            code, n, unit_loads, unit_bound = _compile_unit(text, index)
            units.append(code)
            count += n
            loads |= unit_loads
            bound |= unit_bound
        wanted = {n for n in loads - bound if not hasattr(builtins, n)}
        return units, count, wanted

    def _bind(self, exports: dict, wanted: set[str]) -> None:
        """Give the tests what they use of the candidate's namespace -- never
        shadowing a builtin or anything the trusted code defined."""
        import importlib

        g = self.globals
        entry = self.job.get("entry_point")
        if entry:
            g[entry] = _Proxy(self, entry)
        for name in sorted(wanted):
            if name in g:
                continue
            kind = exports.get(name)
            if kind == "callable":
                g[name] = _Proxy(self, name)
            elif type(kind) is str and kind.startswith("module:"):
                try:  # the tester imports the module itself, from its own path
                    g[name] = importlib.import_module(kind[len("module:"):])
                except Exception:
                    pass
            elif kind == "data":
                try:
                    g[name] = self.request({"get": name})
                except CandidateError:
                    pass
