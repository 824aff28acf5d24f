"""The sandbox's split by where code runs: the host module (``sandbox``), the jail
module (``sandbox_jail``, shipped into the sandbox) and the limits both share
(``sandbox_limits``, shipped alongside). Cheap checks, no sandbox is started."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from rlvr_plugins import sandbox as sb
from rlvr_plugins import sandbox_jail, sandbox_limits

HOST = Path(sb.__file__)
JAIL = Path(sandbox_jail.__file__)
LIMITS = Path(sandbox_limits.__file__)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every import in the file, function-local ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
    return found


def _top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def test_jail_module_imports_only_the_standard_library():
    imports = _imports(JAIL)
    assert imports
    for level, module in imports:
        if level:
            # The one exception: the limits, shipped next to it (and checked below).
            assert (level, module) == (1, "sandbox_limits"), f"the jail module imports .{module}"
        else:
            top = module.split(".")[0]
            assert top in sys.stdlib_module_names, f"the jail module imports {module}, not in the standard library"


def test_limits_module_is_constants_only():
    for level, module in _imports(LIMITS):
        assert level == 0 and module.split(".")[0] in sys.stdlib_module_names, module
    tree = ast.parse(LIMITS.read_text(encoding="utf-8"))
    assigns = [node for node in tree.body[1:] if not isinstance(node, (ast.Import, ast.ImportFrom))]
    assert assigns
    for node in assigns:  # after the docstring: NAME = value, nothing else
        assert isinstance(node, ast.Assign), ast.dump(node)
        assert all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)


def test_only_the_jail_and_limits_sources_are_shipped():
    shipped = sb._shipped_sources()
    assert shipped == (LIMITS.read_bytes(), JAIL.read_bytes())
    host = HOST.read_bytes()
    assert all(source != host and b"class Sandbox" not in source for source in shipped)
    # The bootstrap needs no stand-in for rlvr any more.
    assert "RlvrError" not in sb._BOOTSTRAP and '"rlvr"' not in sb._BOOTSTRAP


def test_shipped_sources_load_in_a_bare_interpreter():
    """The bootstrap as the sandbox runs it, minus starting the fork server, in
    the base interpreter with ``rlvr`` and ``rlvr_plugins`` made unimportable."""
    start = "._server_main()"
    assert sb._BOOTSTRAP.count(start) == 1
    script = ("import sys\nsys.modules.update(rlvr=None, rlvr_plugins=None)\n"
              + sb._BOOTSTRAP.replace(start, "")
              + "import json\nserver = sys.modules['rlvr_sandbox_server']\n"
              + "print(json.dumps([callable(server._server_main), server.MAX_MESSAGE,"
              + " sorted(m for m in sys.modules if 'rlvr' in m and sys.modules[m] is not None)]))\n")
    stdin = b"".join(sb._FRAME.pack(len(s)) + s for s in sb._shipped_sources())
    done = subprocess.run([sb._interpreter(), "-I", "-c", script], input=stdin, capture_output=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    callable_, max_message, modules = json.loads(done.stdout)
    assert callable_ and max_message == sandbox_limits.MAX_MESSAGE
    assert modules == ["rlvr_sandbox.sandbox_limits", "rlvr_sandbox_server"]


def test_each_name_is_defined_in_one_module():
    """Nothing moved is defined twice (a copy would drift from its original)."""
    host, jail, limits = (_top_level_names(p) for p in (HOST, JAIL, LIMITS))
    assert not host & jail
    assert not host & limits
    assert not jail & limits


def test_public_names_stay_on_the_host_module():
    for name in ("Job", "Result", "Sandbox", "get_sandbox", "ISOLATION_LEVELS", "close_all",
                 "DEFAULT_MEMORY_MB", "DEFAULT_TIMEOUT", "DEFAULT_MAX_OUTPUT", "DEFAULT_MAX_PROCS", "_SHARED"):
        assert hasattr(sb, name), name
    for name in sb.__all__:
        assert hasattr(sb, name), name
    assert sb.DEFAULT_TIMEOUT == sandbox_limits.DEFAULT_TIMEOUT
    assert sb.DEFAULT_MEMORY_MB == sandbox_limits.DEFAULT_MEMORY_MB
    assert sb.Job(program="").timeout == sandbox_limits.DEFAULT_TIMEOUT
    # What it protects against is still the first thing the entry point says.
    doc = ast.get_docstring(ast.parse(HOST.read_text(encoding="utf-8")))
    assert doc.startswith("Run untrusted (model-written) Python") and "What it does not protect against" in doc
