"""The ``tools`` environment: Python functions as tools, called the way instruct models are
trained to call them, with JSON through the chat template.

The recipe names the functions (``environment.tools``: registered names, ``rlvr tools``, or
``module:function``); their schemas (``rlvr.kit.tools.function_schema``) are rendered into the
prompt by the model's own chat template (``tools=``), or, for a template that ignores tools, by
``rlvr.kit.tools.tools_prompt`` at the end of the system message. The policy's turn ends with its
message (end-of-sequence). The calls in it are parsed (``parser``: Hermes ``<tool_call>`` JSON,
the default and what the prompt teaches, plain JSON, or ``auto``: either), checked against their schemas, run, and answered with one ``tool``
message per call, rendered by the same template (Qwen2.5 wraps them in ``<tool_response>``); the
policy goes on. A turn without a call is the answer: the episode ends there.

Decisions, and why:

- **Every call gets an answer, never a crash.** A call that cannot run is *invalid*, with a
  kind (``bad_json``, ``not_a_call``, ``too_large``, ``unclosed``, ``unknown_tool``,
  ``bad_arguments``, ``rlvr.kit.tools.INVALID_KINDS``) and a reason the model reads
  (``Error: invalid call (unknown_tool): no tool 'lookup'; tools: calculator``). A call that ran
  and failed (it raised, returned something JSON cannot hold, returned more than
  ``max_result_chars``, crashed, or overran ``timeout_s``) answers ``Error: ...`` too. Calls
  past ``max_calls_per_turn`` or ``max_calls``, or past the episode's ``episode_timeout_s`` of
  tool time, are refused with a line saying so.
- **Where a tool runs** (``run``): ``sandbox`` (the default) runs each call in rlvr's code
  sandbox, the one model-written code runs in (no network, no host files, memory and time
  limits): the arguments are the model's, and a tool that ``eval``s them, walks a path or
  builds a command must not be the way out. The tool's module is sent as its source and
  loaded in the sandbox, so it may import the standard library and packages installed in the
  interpreter's prefix, but not rlvr or an editable install (checked on its first call: a
  module that does not load there stops the run with one line). ``process`` runs calls in
  worker processes of the host (``rlvr.kit.DeadlinePool``), with the user's rights: for tools
  that need files, a database or the network, which the user trusts with any argument. In
  both, a call that overruns is killed from outside; nothing runs in the trainer's own threads
  (a function that hangs there could never be stopped).
- **What a result looks like**: a string as it is; anything else as JSON
  (``ensure_ascii=False``), its first ``max_result_chars`` characters.
- **Metrics per episode** (``env/<key>``): ``tool_calls`` (every call the model wrote, valid or
  not), ``tool_errors`` (calls that ran and failed, timeouts and refusals included),
  ``tool_timeouts``, ``tool_invalid`` and ``tool_invalid_<kind>`` for each kind.
- **The call records** (``state["calls"]``, the rewards' ``env_state``): per call, the turn,
  ``name``, ``arguments``, ``valid``, ``status`` (``ok``, ``error``, ``timeout``, ``refused``,
  ``invalid``), ``result`` (the value, when ok), ``reason`` and ``kind`` (when not). The
  built-in ``tool_call`` reward reads them.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pickle
import secrets
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Sequence

from annotated_types import Ge, Gt, Le

from rlvr import Reply, RlvrError, hookimpl
from rlvr.kit import Unsandboxed, one_line, shared_pool
from rlvr.kit.tools import Tool, ToolCall, check_arguments, parse_tool_calls

from . import tool_functions
from .sandbox import DEFAULT_MEMORY_MB, Isolation, Job, get_sandbox

__all__ = ["ToolsEnv", "make_tools_env", "rlvr_register_environments", "rlvr_register_tools"]

Run = Annotated[Literal["sandbox", "process"], Unsandboxed("process")]  # process: calls run on the host
Parser = Literal["auto", "hermes", "json"]
MAX_SANDBOX_OUTPUT = 1 << 20


@hookimpl
def rlvr_register_environments(register: Any) -> None:
    register("tools", make_tools_env,
             description="Python functions as tools: JSON calls through the chat template, answered as tool messages")


@hookimpl
def rlvr_register_tools(register: Any) -> None:
    register("calculator", tool_functions.calculator)


def make_tools_env(
    row: dict,
    *,
    tools: Sequence[Tool] = (),
    run: Run = "sandbox",
    parser: Parser = "hermes",
    timeout_s: Annotated[float, Gt(0), Le(600)] = 5.0,
    episode_timeout_s: Annotated[float, Gt(0), Le(86400)] = 30.0,
    max_calls: Annotated[int, Ge(1), Le(1000)] = 16,
    max_calls_per_turn: Annotated[int, Ge(1), Le(100)] = 4,
    max_call_chars: Annotated[int, Ge(16), Le(1 << 20)] = 4000,
    max_result_chars: Annotated[int, Ge(1), Le(1 << 20)] = 2000,
    memory_mb: Annotated[int, Ge(64)] = DEFAULT_MEMORY_MB,
    isolation: Isolation = "bwrap",
) -> ToolsEnv:
    """Python functions as tools (``environment.tools``): the model calls them with JSON, each
    call is checked against its schema, run (``run``: ``sandbox`` or ``process``) and answered
    with a ``tool`` message.

    ``parser``: ``hermes`` (``<tool_call>`` tags, what Qwen2.5's template and rlvr's own tools
    block teach; a JSON call without them is invalid, ``untagged``), ``json`` (a turn that is a
    JSON call: Llama 3.x, Mistral) or ``auto`` (either); ``timeout_s``: wall seconds per call; ``episode_timeout_s``: tool seconds per
    episode; ``max_calls`` per episode and ``max_calls_per_turn``; ``max_call_chars``: the
    longest call read; ``max_result_chars``: the longest result returned; ``memory_mb`` and
    ``isolation``: the sandbox's, for ``run: sandbox``."""
    if not tools:
        raise RlvrError("environment 'tools' has no tools: list them under environment.tools "
                        "(registered names, `rlvr tools`, or module:function)")
    runner = SandboxCalls(isolation, memory_mb) if run == "sandbox" else ProcessCalls()
    return ToolsEnv(list(tools), runner, parser=parser, timeout_s=float(timeout_s),
                    episode_timeout_s=float(episode_timeout_s), max_calls=int(max_calls),
                    max_calls_per_turn=int(max_calls_per_turn), max_call_chars=int(max_call_chars),
                    max_result_chars=int(max_result_chars))


@dataclass(frozen=True)
class Outcome:
    """What running one call gave: ``status`` ``ok`` (``value`` holds the result) or ``error`` /
    ``timeout`` (``message`` says why), and the wall seconds it took."""

    status: str
    value: Any = None
    message: str = ""
    seconds: float = 0.0


class ToolsEnv:
    """One episode of the ``tools`` environment (see the module docstring)."""

    stop: tuple[str, ...] = ()  # a turn is the policy's whole message: it may hold several calls

    def __init__(self, tools: list[Tool], runner, *, parser: str = "hermes", timeout_s: float = 5.0,
                 episode_timeout_s: float = 30.0, max_calls: int = 16, max_calls_per_turn: int = 4,
                 max_call_chars: int = 4000, max_result_chars: int = 2000) -> None:
        self.tools = {t.name: t for t in tools}
        self.runner, self.parser = runner, parser
        self.timeout_s, self.episode_timeout_s = timeout_s, episode_timeout_s
        self.max_calls, self.max_calls_per_turn = max_calls, max_calls_per_turn
        self.max_call_chars, self.max_result_chars = max_call_chars, max_result_chars
        self.calls: list[dict] = []
        self.turn = 0
        self.seconds = 0.0
        self.totals = {"tool_calls": 0, "tool_errors": 0, "tool_timeouts": 0, "tool_invalid": 0}

    @property
    def state(self) -> dict:
        return {"calls": [dict(c) for c in self.calls], **self.totals, "tool_seconds": round(self.seconds, 4)}

    def step(self, turn: str) -> Reply:
        self.turn += 1
        calls = parse_tool_calls(turn, self.parser, max_chars=self.max_call_chars)
        if not calls:
            return Reply(done=True)
        before = dict(self.totals)
        texts = [self._answer(call, i) for i, call in enumerate(calls)]
        metrics = {k: v - before.get(k, 0) for k, v in self.totals.items() if v != before.get(k, 0)}
        return Reply(text=texts, role="tool", metrics=metrics)

    def _answer(self, call: ToolCall, index: int) -> str:
        """Check and run one call; record it; the text of its tool message."""
        self.totals["tool_calls"] += 1
        if call.invalid is None:
            call = self._checked(call)
        record: dict[str, Any] = {"turn": self.turn, "name": call.name, "arguments": call.arguments}
        if call.invalid is not None:
            self.totals["tool_invalid"] += 1
            key = f"tool_invalid_{call.invalid}"
            self.totals[key] = self.totals.get(key, 0) + 1
            self.calls.append({**record, "valid": False, "status": "invalid", "kind": call.invalid,
                               "reason": call.reason, "text": call.text})
            return f"Error: invalid call ({call.invalid}): {call.reason}"
        refusal = self._refusal(index)
        if refusal:
            self.totals["tool_errors"] += 1
            self.calls.append({**record, "valid": True, "status": "refused", "reason": refusal})
            return f"Error: {refusal}"
        left = self.episode_timeout_s - self.seconds
        outcome = self.runner.call(self.tools[call.name], call.arguments, min(self.timeout_s, left),
                                   self.max_result_chars)
        self.seconds += outcome.seconds
        if outcome.status != "ok":
            self.totals["tool_errors"] += 1
            self.totals["tool_timeouts"] += outcome.status == "timeout"
            self.calls.append({**record, "valid": True, "status": outcome.status, "reason": outcome.message})
            return f"Error: {outcome.message}"
        self.calls.append({**record, "valid": True, "status": "ok", "result": outcome.value})
        return result_text(outcome.value)

    def _checked(self, call: ToolCall) -> ToolCall:
        tool = self.tools.get(call.name or "")
        if tool is None:
            return call.refused("unknown_tool", f"no tool {call.name!r}; tools: {', '.join(self.tools)}")
        reason = check_arguments(tool.parameters, call.arguments or {})
        return call.refused("bad_arguments", f"{tool.name}: {reason}") if reason else call

    def _refusal(self, index: int) -> str:
        if index >= self.max_calls_per_turn:
            return f"not run: at most {self.max_calls_per_turn} calls a turn"
        if sum(c["status"] not in ("invalid", "refused") for c in self.calls) >= self.max_calls:
            return f"not run: the limit of {self.max_calls} calls per episode is reached"
        if self.seconds >= self.episode_timeout_s:
            return f"not run: the episode's {self.episode_timeout_s:g} seconds of tool time are spent"
        return ""


def result_text(value: Any) -> str:
    """A result as its tool message shows it: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# --- running calls ---------------------------------------------------------------------------------

def _finish(value: Any, limit: int) -> dict:
    """What a call's worker sends back: the value when JSON holds it within ``limit`` characters,
    else why not (run where the function ran, so only plain data crosses back)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return {"error": f"the tool returned {type(value).__name__}, which JSON cannot hold ({one_line(exc, 80)})"}
    shown = value if isinstance(value, str) else text
    if len(shown) > limit:
        return {"error": f"the tool's result is {len(shown)} characters, over the limit of {limit}"}
    return {"value": json.loads(text)}


def call_in_worker(item: tuple) -> dict:
    """``run: process``: one call in a worker process (``DeadlinePool``). The function comes by
    reference: its module, imported from the folder it was found in (a worker started before
    that folder was on the host's path still finds it), or, from a script, as the pool sent it."""
    target, arguments, limit = item
    try:
        if isinstance(target, tuple):
            module, name, folder = target
            if folder and folder not in sys.path:
                sys.path.append(folder)
            fn = getattr(importlib.import_module(module), name)
        else:
            fn = target
    except Exception as exc:  # noqa: BLE001
        return {"error": f"the tool could not be loaded in a worker process: {one_line(exc, 300)}"}
    try:
        value = fn(**json.loads(arguments))
    except Exception as exc:  # noqa: BLE001 - the tool's failure is the model's answer
        return {"error": f"the tool raised {one_line(exc, 300)}"}
    return _finish(value, limit)


def _reference(fn) -> tuple | Any:
    """How a worker process finds ``fn``: (module, name, the folder its top-level package is
    in), or ``fn`` itself for a script's or notebook's function (the pool sends what
    ``__main__`` defines by value: a worker does not import it)."""
    module_name = getattr(fn, "__module__", None)
    module = sys.modules.get(module_name or "")
    if module is None or module_name == "__main__" or getattr(fn, "__qualname__", "") != fn.__name__:
        return fn
    top = sys.modules.get(module_name.split(".")[0])
    where = getattr(top, "__file__", None)
    folder = None
    if where:
        path = Path(where).resolve()
        folder = str(path.parent.parent if path.name == "__init__.py" else path.parent)
    return (module_name, fn.__name__, folder)


class ProcessCalls:
    """``run: process``: calls run in the process-wide worker pool, each killed past its time."""

    _checked: set = set()  # the functions known to reach a worker

    def call(self, tool: Tool, arguments: dict, timeout: float, limit: int) -> Outcome:
        target = _reference(tool.fn)
        if id(tool.fn) not in self._checked:
            try:
                pickle.loads(pickle.dumps(target))
            except Exception as exc:  # noqa: BLE001
                raise RlvrError(f"tool {tool.name!r} cannot be sent to a worker process ({one_line(exc, 120)}): "
                                "define it at the top level of a module") from None
            self._checked.add(id(tool.fn))
        start = time.perf_counter()
        result = shared_pool(0, None).submit(call_in_worker, (target, json.dumps(arguments), limit),
                                             timeout=timeout).result()
        seconds = time.perf_counter() - start
        if result.status == "timeout":
            return Outcome("timeout", message=f"the tool did not finish within {timeout:.3g} seconds", seconds=seconds)
        if result.status != "ok":
            return Outcome("error", message=f"the tool's worker failed: {one_line(result.error, 300)}", seconds=seconds)
        answer = result.value
        if "error" in answer:
            return Outcome("error", message=answer["error"], seconds=seconds)
        return Outcome("ok", answer["value"], seconds=seconds)


# The program a sandboxed call runs: the tool's module from its source, then one call. What the
# function prints is swallowed; the answer is one line after a mark only this call knows.
HARNESS = '''
import contextlib as _contextlib, io as _io, json as _json, sys as _sys, types as _types

def _rlvr_tool_call(source, filename, module, function, arguments, limit, mark):
    def send(answer):
        _sys.stdout.write(mark + _json.dumps(answer) + "\\n")
    namespace = _types.ModuleType(module)
    namespace.__file__ = filename
    _sys.modules[module] = namespace
    try:
        exec(compile(source, filename, "exec"), namespace.__dict__)
        fn = getattr(namespace, function)
    except BaseException as exc:
        return send({"load": type(exc).__name__ + ": " + str(exc)[:300]})
    if arguments is None:
        return send({"loaded": True})
    sink = _io.StringIO()
    try:
        with _contextlib.redirect_stdout(sink), _contextlib.redirect_stderr(sink):
            value = fn(**_json.loads(arguments))
    except Exception as exc:
        return send({"error": "the tool raised " + type(exc).__name__ + ": " + str(exc)[:300]})
    try:
        text = _json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return send({"error": "the tool returned " + type(value).__name__ + ", which JSON cannot hold"})
    shown = value if isinstance(value, str) else text
    if len(shown) > limit:
        return send({"error": "the tool's result is %d characters, over the limit of %d" % (len(shown), limit)})
    send({"value": _json.loads(text)})
'''


@dataclass(frozen=True)
class Source:
    """A tool's module as the sandbox loads it: its source text, file name, module name and the
    function's name in it."""

    text: str
    filename: str
    module: str
    function: str


def tool_source(tool: Tool) -> Source:
    """The source of ``tool``'s module; ``RlvrError`` for a function the sandbox cannot load
    from its module (a lambda, a closure, a method, one without a source file)."""
    fn = tool.fn
    qualname, name = getattr(fn, "__qualname__", ""), getattr(fn, "__name__", "")
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    if not name or qualname != name or module is None:
        raise RlvrError(f"tool {tool.name!r} is not a function at the top level of a module (a lambda, closure or "
                        "method): the sandbox loads tools from their module's source; define it at the top level, "
                        "or set environment.options.run: process")
    try:
        text = inspect.getsource(module)
    except (OSError, TypeError) as exc:
        raise RlvrError(f"tool {tool.name!r}: the source of module {module.__name__!r} cannot be read ({exc}); "
                        "the sandbox loads tools from source, or set environment.options.run: process") from None
    return Source(text, getattr(module, "__file__", None) or f"<{module.__name__}>",
                  "__rlvr_tool__" if module.__name__ == "__main__" else module.__name__, name)


class SandboxCalls:
    """``run: sandbox``: each call is a program in the code sandbox that loads the tool's module
    from source and calls it; the first call of each tool checks that its module loads there."""

    _loaded: dict[tuple, str] = {}  # (module, function, isolation) -> "" or why it does not load
    _lock = threading.Lock()

    def __init__(self, isolation: str = "bwrap", memory_mb: int = DEFAULT_MEMORY_MB):
        self.isolation, self.memory_mb = isolation, memory_mb
        self._sources: dict[str, Source] = {}

    def call(self, tool: Tool, arguments: dict, timeout: float, limit: int) -> Outcome:
        source = self._source(tool)
        answer, status, seconds = self._run(source, json.dumps(arguments), timeout, limit)
        if status == "timeout":
            return Outcome("timeout", message=f"the tool did not finish within {timeout:.3g} seconds", seconds=seconds)
        if answer is None:
            return Outcome("error", message=f"the tool's sandboxed run ended without an answer ({status})",
                           seconds=seconds)
        if "error" in answer or "load" in answer:
            return Outcome("error", message=str(answer.get("error") or answer.get("load")), seconds=seconds)
        return Outcome("ok", answer.get("value"), seconds=seconds)

    def _source(self, tool: Tool) -> Source:
        if tool.name not in self._sources:
            source = tool_source(tool)
            key = (source.module, source.function, source.filename, self.isolation)
            with self._lock:
                if key not in self._loaded:
                    answer, status, _ = self._run(source, None, 60.0, 100)
                    why = "" if answer and answer.get("loaded") else (
                        answer.get("load") if answer else f"the sandboxed run ended with {status}")
                    self._loaded[key] = why or ""
            if self._loaded[key]:
                raise RlvrError(f"tool {tool.name!r}: its module {source.module!r} does not load in the sandbox "
                                f"({one_line(self._loaded[key], 200)}); a sandboxed tool's module may import the "
                                "standard library and installed packages only, or set environment.options.run: process")
            self._sources[tool.name] = source
        return self._sources[tool.name]

    def _run(self, source: Source, arguments: str | None, timeout: float, limit: int
             ) -> tuple[dict | None, str, float]:
        mark = f"\u241e{secrets.token_hex(8)}:"
        program = (HARNESS + f"\n_rlvr_tool_call({source.text!r}, {source.filename!r}, {source.module!r}, "
                   f"{source.function!r}, {arguments!r}, {int(limit)}, {mark!r})\n")
        keep = 4 * limit + 4096
        job = Job(program=program, mode="exec", timeout=timeout, memory_mb=self.memory_mb,
                  max_output=max(MAX_SANDBOX_OUTPUT, keep), keep_output=keep)
        result = get_sandbox(self.isolation).run(job)
        answer = None
        for line in reversed(result.output.splitlines()):
            if line.startswith(mark):
                try:
                    answer = json.loads(line[len(mark):])
                except ValueError:
                    answer = None
                break
        return answer, result.status, result.elapsed
