"""The sandbox package's split by where code runs: the host modules (``pool``, ``worker``,
``launch``, ``jobs``), the jail package (``jail``, whose sources are shipped into the
sandbox) and the limits both share (``limits``, shipped alongside). Cheap checks, no
sandbox is started."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from rlvr_plugins import sandbox as sb
from rlvr_plugins.sandbox import launch, limits

PACKAGE = Path(sb.__file__).parent
JAIL = PACKAGE / "jail"
LIMITS = Path(limits.__file__)
JAIL_MODULES = sorted(p for p in JAIL.glob("*.py") if p.name != "__init__.py")
HOST_MODULES = sorted(p for p in PACKAGE.glob("*.py") if p != LIMITS)
ALL_MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_LINES = 550


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(level, module, names) of every import in the file, function-local ones included."""
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found += [(0, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or "", [alias.name for alias in node.names]))
    return found


def _top_level_names(path: Path) -> set[str]:
    names = set()
    for node in _tree(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names - {"__all__"}


def test_jail_modules_import_only_the_standard_library():
    siblings = {p.stem for p in JAIL_MODULES}
    for path in JAIL_MODULES:
        imports = _imports(path)
        assert imports, path.name
        for level, module, _ in imports:
            if level == 1:  # another jail module, shipped with it
                assert module in siblings, f"{path.name} imports .{module}"
            elif level == 2:  # the limits, shipped with it (and checked below); never a host module
                assert module == "limits", f"{path.name} imports ..{module}"
            else:
                assert level == 0, f"{path.name} imports {'.' * level}{module}"
                top = module.split(".")[0]
                assert top in sys.stdlib_module_names, f"{path.name} imports {module}, not in the standard library"


def test_jail_package_init_holds_no_code():
    """It is not shipped: the jail's modules must not need it."""
    body = _tree(JAIL / "__init__.py").body
    assert len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)


def test_limits_module_is_constants_only():
    for level, module, _ in _imports(LIMITS):
        assert level == 0 and module.split(".")[0] in sys.stdlib_module_names, module
    tree = _tree(LIMITS)
    assigns = [node for node in tree.body[1:] if not isinstance(node, (ast.Import, ast.ImportFrom))]
    assert assigns
    for node in assigns:  # after the docstring: NAME = value, nothing else
        assert isinstance(node, ast.Assign), ast.dump(node)
        assert all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)


def test_only_the_jail_and_limits_sources_are_shipped():
    shipped = launch.shipped_sources()
    by_path = {PACKAGE.parent / filename: source for _, filename, source in shipped}
    assert set(by_path) == {LIMITS, *JAIL_MODULES}
    assert all(path.read_bytes() == source for path, source in by_path.items())
    names = [name for name, _, _ in shipped]
    assert names == [launch.JAIL_PACKAGE + "." + ".".join(Path(f).with_suffix("").parts[1:]) for _, f, _ in shipped]
    assert names[0] == "rlvr_sandbox.limits" and names[-1] == "rlvr_sandbox.jail.server"
    for path in HOST_MODULES:
        host = path.read_bytes()
        assert all(source != host for source in by_path.values())
    assert all(b"class Sandbox" not in source for source in by_path.values())
    # The bootstrap needs no stand-in for rlvr.
    assert "RlvrError" not in launch.BOOTSTRAP and '"rlvr"' not in launch.BOOTSTRAP


def test_each_name_is_defined_in_one_module():
    """Nothing moved is defined twice (a copy would drift from its original)."""
    seen: dict[str, Path] = {}
    for path in ALL_MODULES:
        for name in _top_level_names(path):
            assert name not in seen, f"{name} is defined in {seen.get(name)} and {path}"
            seen[name] = path


def test_no_private_name_crosses_modules():
    """What one module uses of another is its public (documented) API."""
    for path in ALL_MODULES:
        tree = _tree(path)
        imported_modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {'.' * node.level}{node.module or ''}"
                if node.module in (None, "jail"):
                    imported_modules.update(a.asname or a.name for a in node.names)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in imported_modules):
                assert not node.attr.startswith("_"), f"{path.name} uses {node.value.id}.{node.attr}"


def test_every_module_says_what_it_owns_and_stays_small():
    for path in ALL_MODULES:
        assert ast.get_docstring(_tree(path)), path
        assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES, path


def test_public_names_are_on_the_package():
    for name in ("Job", "Result", "Sandbox", "get_sandbox", "ISOLATION_LEVELS", "close_all", "escape_controls",
                 "DEFAULT_MEMORY_MB", "DEFAULT_TIMEOUT", "DEFAULT_MAX_OUTPUT", "DEFAULT_MAX_PROCS"):
        assert name in sb.__all__, name
    for name in sb.__all__:
        assert hasattr(sb, name), name
    assert sb.DEFAULT_TIMEOUT == limits.DEFAULT_TIMEOUT
    assert sb.DEFAULT_MEMORY_MB == limits.DEFAULT_MEMORY_MB
    assert sb.Job(program="").timeout == limits.DEFAULT_TIMEOUT
    # What it protects against is still the first thing the entry point says.
    doc = ast.get_docstring(_tree(Path(sb.__file__)))
    assert doc.startswith("Run untrusted (model-written) Python") and "What it does not protect against" in doc
