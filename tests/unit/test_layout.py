"""The layout shows the design, and stays that way:

- each part of rlvr (a subpackage) says in its docstring what it may import (``May import: ...``)
  and imports nothing else of rlvr, function-level imports included; the parts form no cycle and
  neither do the modules;
- the root package (``rlvr/__init__.py``: the hook API) is the floor every part stands on and
  imports no part of rlvr;
- plugins (the built-ins in ``plugins/`` and the example packages) import from rlvr only the hook
  API (``rlvr``) and the toolkit (``rlvr.kit``), as a third-party plugin must;
- what one module uses of another is its public API: no module of ``rlvr/``, ``plugins/`` or
  ``examples/`` imports (or reads as ``module._name``) an underscore name of another;
- no module is over 600 lines.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "rlvr"
MAX_LINES = 600
PUBLIC = ("rlvr", "rlvr.kit")  # what a plugin may import from rlvr (and rlvr.kit's modules)


def imported_modules(path: Path, package: str | None = None) -> set[str]:
    """Every module ``path`` imports (absolute names; ``from rlvr import x`` counts as ``rlvr.x``
    when ``x`` is a module of rlvr), wherever in the file the import is."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                assert package, f"{path}: relative import outside a package"
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.add(module)
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                if (PACKAGE / Path(*candidate.split(".")[1:])).with_suffix(".py").exists() or \
                        (PACKAGE / Path(*candidate.split(".")[1:])).is_dir():
                    found.add(candidate)
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def parts() -> dict[str, set[str]]:
    """Each subpackage of rlvr -> what its docstring says it may import."""
    allowed = {}
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        m = re.search(r"^May import: (.+?)\.?$", doc, re.M)
        assert m, f"{init.relative_to(ROOT)}: its docstring has no 'May import: ...' line"
        allowed[f"rlvr.{init.parent.name}"] = {name.strip() for name in m.group(1).split(",")}
    return allowed


def part_of(module: str) -> str:
    """``rlvr.sampling.server`` -> ``rlvr.sampling``; ``rlvr`` -> ``rlvr``."""
    return ".".join(module.split(".")[:2])


def test_every_part_documents_its_job_and_imports():
    allowed = parts()
    assert {"rlvr.host", "rlvr.recipe", "rlvr.kit", "rlvr.sampling", "rlvr.training", "rlvr.rewards",
            "rlvr.evaluation", "rlvr.api", "rlvr.cli"} <= set(allowed)
    for part, names in allowed.items():
        unknown = names - set(allowed) - {"rlvr"}
        assert not unknown, f"{part} may import {unknown}, which are not parts of rlvr"
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules outside any part: {loose}; put each in the part that owns its job"


def test_parts_import_only_what_their_docstring_allows():
    allowed = parts()
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        part = part_of(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for module in imported_modules(path, package):
            if not (module == "rlvr" or module.startswith("rlvr.")):
                continue
            target = part_of(module)
            if target in (part, "rlvr"):
                continue
            if target not in allowed.get(part, ()):  # the root, no part, may import none
                problems.append(f"{path.relative_to(ROOT)} imports {module} ({part} may import: "
                                f"{', '.join(sorted(allowed.get(part, ()))) or 'nothing of rlvr'})")
    assert not problems, "\n".join(problems)


def test_the_root_package_imports_nothing_of_rlvr():
    """``rlvr/__init__.py`` (hookimpl, Score, RlvrError, Reply) is imported by every part: it imports
    none, not even in a function (the Python API is ``rlvr.api``'s)."""
    found = sorted(m for m in imported_modules(PACKAGE / "__init__.py", "rlvr") if m.split(".")[0] == "rlvr")
    assert not found, f"rlvr/__init__.py imports {found}: the root package is the floor, it imports no part"


def test_parts_and_modules_form_no_cycle():
    allowed = parts()

    def visit(graph, node, trail):
        for dep in graph.get(node, ()):
            assert dep not in trail, f"import cycle: {' -> '.join(trail + [dep])}"
            visit(graph, dep, trail + [dep])

    for part in allowed:
        visit({p: allowed[p] - {"rlvr", p} for p in allowed}, part, [part])
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__init__.py":
            continue
        name = module_name(path)
        modules[name] = {m for m in imported_modules(path, name.rpartition(".")[0])
                         if m.startswith("rlvr.") and m != name and (PACKAGE / Path(*m.split(".")[1:])).with_suffix(".py").exists()}
    for name in modules:
        visit(modules, name, [name])


def plugin_files() -> list[Path]:
    files = sorted((ROOT / "plugins").rglob("*.py"))
    for example in sorted((ROOT / "examples").iterdir()):
        for path in sorted(example.rglob("*.py")):
            if "tests" not in path.relative_to(example).parts:
                files.append(path)
    return files


def test_plugins_import_only_the_public_api():
    files = plugin_files()
    assert any(p.parent.name == "plugins" for p in files) and any("examples" in p.parts for p in files)
    problems = []
    for path in files:
        # A script outside any package (examples/python-api/) is a user's, who may also call the Python API.
        public = PUBLIC if (path.parent / "__init__.py").exists() else (*PUBLIC, "rlvr.api")
        for module in absolute_imports(path):  # a relative import cannot reach rlvr
            if (module == "rlvr" or module.startswith("rlvr.")) and not (
                    module in public or module.startswith("rlvr.kit.")):
                problems.append(f"{path.relative_to(ROOT)} imports {module}: plugins use only {' and '.join(public)}")
    assert not problems, "\n".join(problems)


def absolute_imports(path: Path) -> set[str]:
    """The modules ``path`` imports by absolute name (``from rlvr import kit`` counts as ``rlvr.kit``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
            if node.module == "rlvr":
                found.update(f"rlvr.{a.name}" for a in node.names
                             if (PACKAGE / a.name).is_dir() or (PACKAGE / f"{a.name}.py").exists())
    return found


def tree_modules() -> dict[Path, str]:
    """Every module of ``rlvr/``, ``plugins/`` (``rlvr_plugins``) and ``examples/`` (their packages
    and scripts, not their tests) -> the name it is imported by."""
    found = {path: module_name(path) for path in sorted(PACKAGE.rglob("*.py"))}
    for path in plugin_files():
        if path.is_relative_to(ROOT / "plugins"):
            found[path] = "rlvr_plugins" + module_name(path).removeprefix("plugins")
        else:  # examples/<project>/<package>/...: the package's name
            parts = path.relative_to(ROOT / "examples").with_suffix("").parts[1:]
            found[path] = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return found


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_names_used(path: Path, name: str, known: set[str]) -> list[str]:
    """The underscore names ``path`` (module ``name``) takes from another module of ``known``:
    ``from m import _x`` (relative, or in a function, too), ``import m._x``, and ``m._x`` or
    ``pkg.m._x`` where ``m`` is bound by an import to a module of ``known``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    found, bound = [], {}  # bound: a name the file binds by an import -> the module of known it is
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known and any(is_private(part) for part in alias.name.split(".")):
                    found.append(alias.name)
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module not in known:
                continue
            for alias in node.names:
                if is_private(alias.name):
                    found.append(f"{module}.{alias.name}")
                bound[alias.asname or alias.name] = f"{module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                module = ".".join([bound[value.id], *reversed(chain)])
                if module in known and module != name:
                    found.append(f"{module}.{node.attr}")
    return sorted(set(found))


def test_no_private_name_crosses_modules():
    """What one module uses of another is its public API, in the whole tree as in the sandbox
    (tests/unit/test_plugins_sandbox_layout.py): a name another module needs is public, without the underscore."""
    modules = tree_modules()
    known = set(modules.values())
    assert {"rlvr", "rlvr.cli.common", "rlvr_plugins.math.parse", "rlvr_countdown"} <= known
    problems = [f"{path.relative_to(ROOT)} uses {used}" for path, name in modules.items()
                for used in private_names_used(path, name, known)]
    assert not problems, "underscore names used across modules (make them public):\n" + "\n".join(problems)


@pytest.mark.parametrize("where", ["rlvr", "plugins"])
def test_no_module_is_over_600_lines(where):
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / where).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}; split them by job"


def test_the_checks_above_can_fail(tmp_path):
    """The import reader sees function-level and ``from rlvr import module`` imports."""
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from rlvr import kit\n    import rlvr.training.engine\n")
    assert {"rlvr.kit", "rlvr.training.engine"} <= imported_modules(source)
    assert part_of("rlvr.training.engine") == "rlvr.training"
    source.write_text("from .sibling import x\ndef f():\n    from rlvr.rewards.runner import score_batch\n")
    assert "rlvr.rewards.runner" in absolute_imports(source)


def test_the_private_name_check_can_fail(tmp_path):
    """Each way of reaching another module's underscore name is seen; dunders and the module's
    own names are not; nor are other packages' (``torch._C`` is not ours to rule on)."""
    known = {"pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c"}
    probe = tmp_path / "b.py"
    probe.write_text("import pkg.sub.c\nimport pkg.a as a\nfrom . import sub\nfrom pkg import __version__\n"
                     "from torch import _C\nfrom .a import _x, y\ndef f():\n    from .sub.c import _late\n"
                     "    return a._y, pkg.sub.c._z, sub.c._w, sub._v, _C._q, y._not_a_module, a.__doc__\n")
    assert private_names_used(probe, "pkg.b", known) == [
        "pkg.a._x", "pkg.a._y", "pkg.sub._v", "pkg.sub.c._late", "pkg.sub.c._w", "pkg.sub.c._z"]
    probe.write_text("import pkg._hidden\n_own = 1\nprint(_own)\n")
    assert private_names_used(probe, "pkg.b", known | {"pkg._hidden"}) == ["pkg._hidden"]
    assert is_private("_x") and not is_private("__all__") and not is_private("x")
    rlvr = tree_modules()
    assert rlvr[PACKAGE / "cli" / "common.py"] == "rlvr.cli.common"
    assert rlvr[ROOT / "plugins" / "math" / "parse.py"] == "rlvr_plugins.math.parse"
    assert rlvr[ROOT / "examples" / "rlvr-countdown" / "rlvr_countdown" / "__init__.py"] == "rlvr_countdown"


def test_every_package_is_in_the_distribution():
    """A wheel ships only the packages pyproject.toml lists: each folder with an __init__.py."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    roots = {name: ROOT / folder for name, folder in config["package-dir"].items()}
    roots.setdefault("rlvr", PACKAGE)
    found = set()
    for name, folder in roots.items():
        for init in folder.rglob("__init__.py"):
            found.add(".".join([name, *init.parent.relative_to(folder).parts]))
    assert found == listed, f"missing from pyproject.toml: {sorted(found - listed)}; listed but absent: {sorted(listed - found)}"


def test_the_toolkit_exports_what_it_documents():
    import rlvr.kit as kit

    doc = kit.__doc__ or ""
    for name in kit.__all__:
        assert getattr(kit, name, None) is not None, f"rlvr.kit.__all__ names {name}, which it lacks"
        assert f"``{name}``" in doc, f"rlvr.kit's docstring does not describe {name}"
