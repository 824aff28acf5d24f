"""Which code a recipe may import, and what else it may ask for only with its user's consent.

A recipe is data that people hand each other; a reference in it runs code when imported and
each time it is called (a recipe once named the standard library's ``pty:spawn`` as a reward,
and its prompts became the command line; another named a plugin's private ``exec`` helper as a
tool, and the model it trained called it). A ``module:function`` reference (a reward, a tool)
therefore resolves only to code the user chose:

- a module (file or package) in the recipe's folder or in the current folder;
- a module in the allow-list: ``--allow-module NAME`` (repeatable), ``RLVR_ALLOW_MODULES``
  (comma-separated), and by default ``trl.rewards`` (TRL's documented reward functions); a name
  allows its submodules too.

What plugins offer, a recipe names by the names they registered (``rlvr rewards``, ``rlvr
tools``); a plugin's package is no source of references (hundreds of its callables were never
meant to be called by a recipe). A name that starts with ``_`` (a module, a package or the
function, or the function's own ``__name__``) is private and never a reference. The standard
library is refused even when allow-listed, and so is a function defined there that an allowed
module imported (no standard-library function is a reward). Where a module comes from is decided
without importing it (``PathFinder`` and ``find_spec`` on the top-level name only), so ``rlvr
validate`` says what a recipe would import, from which file and why, before any of it runs.

Option values that run model-written code or tool calls outside the sandbox (``isolation:
process``, a tools environment's ``run: process``: options annotated with
:class:`rlvr.kit.Unsandboxed`) are the user's to choose: a recipe that asks for them is refused
unless the user allows it (``--allow-unsandboxed``, ``RLVR_ALLOW_UNSANDBOXED=1``). What is not
protected: the code the user allowed runs with the user's rights.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from rlvr import RlvrError
from rlvr.host.options import did_you_mean
from rlvr.kit import one_line
from rlvr.kit.text import EXTRAS, escape_controls, install_line

ALLOW_ENV = "RLVR_ALLOW_MODULES"
UNSANDBOXED_ENV = "RLVR_ALLOW_UNSANDBOXED"
# TRL's rewards are documented as usable by reference (README); they are reward functions only.
DEFAULT_ALLOWED = ("trl.rewards",)
HOW_TO_ALLOW = f"allow it with --allow-module {{name}} or {ALLOW_ENV}={{name}} if you trust it"


@dataclass(frozen=True)
class CodeSource:
    """Where a module a recipe names comes from, found without importing it."""

    module: str
    path: str  # the top-level module's file or package folder ("" when it has none)
    reason: str  # why it may be imported: "in the recipe's folder", "--allow-module", ...
    folder: Path | None = None  # the folder it is loaded from, when allowed as a file there

    def describe(self) -> str:
        return f"{self.module} from {self.path or '(no file)'} ({self.reason})"


def is_standard_library(top: str) -> bool:
    return top in sys.stdlib_module_names or top in sys.builtin_module_names


def _env_allowed() -> list[str]:
    return [name.strip() for name in os.environ.get(ALLOW_ENV, "").split(",") if name.strip()]


def _under(module: str, allowed: str) -> bool:
    return module == allowed or module.startswith(allowed + ".")


def _spec_path(spec) -> str:
    if spec.submodule_search_locations and (spec.origin is None or spec.origin.endswith("__init__.py")):
        locations = list(spec.submodule_search_locations)
        return locations[0] if locations else ""
    return spec.origin or ""


@dataclass(frozen=True)
class ImportPolicy:
    """What the user lets a recipe have: the folders and names its references may import from
    (the recipe's folder, when it is a file; the current folder, read when asked; the allow-list
    from ``allowed``, ``--allow-module``, ``RLVR_ALLOW_MODULES`` and :data:`DEFAULT_ALLOWED`), and
    whether it may run code outside the sandbox (``unsandboxed``, ``--allow-unsandboxed``, or
    ``RLVR_ALLOW_UNSANDBOXED=1``)."""

    recipe_folder: Path | None = None
    allowed: tuple[str, ...] = ()
    unsandboxed: bool = False

    def for_recipe(self, path: str | os.PathLike | None) -> ImportPolicy:
        folder = Path(path).resolve().parent if path is not None else None
        return ImportPolicy(folder, self.allowed, self.unsandboxed)

    def allows_unsandboxed(self) -> str | None:
        """Who allowed code outside the sandbox (``"--allow-unsandboxed"``, the variable), or None."""
        if self.unsandboxed:
            return "--allow-unsandboxed"
        given = os.environ.get(UNSANDBOXED_ENV, "")
        value = given.strip().lower()
        if value in ("", "0", "false", "no"):
            return None
        if value in ("1", "true", "yes"):
            return UNSANDBOXED_ENV
        raise RlvrError(f"{UNSANDBOXED_ENV}={escape_controls(one_line(given, 40))}: set it to 1 to allow code "
                        "outside the sandbox, or leave it unset")

    def folders(self) -> list[tuple[Path, str]]:
        found = [(Path(os.getcwd()).resolve(), "in the current folder")]
        if self.recipe_folder is not None and self.recipe_folder != found[0][0]:
            found.insert(0, (self.recipe_folder, "in the recipe's folder"))
        return found

    def allow_list(self) -> list[tuple[str, str]]:
        return [*((n, "--allow-module") for n in self.allowed), *((n, ALLOW_ENV) for n in _env_allowed()),
                *((n, "allowed by default") for n in DEFAULT_ALLOWED)]

    def locate(self, module: str, plugin_packages: Mapping[str, str] | None = None) -> CodeSource:
        """Where ``module`` would be imported from and why that is allowed; ``RlvrError`` (one line)
        when it is not. ``plugin_packages``: top-level package -> whose plugins were loaded from it
        (``"rlvr's plugins"``), named in the refusal (a plugin's package is no source of
        references). Nothing of the module runs: only its top-level name is looked up."""
        top = module.split(".")[0]
        if not all(part.isidentifier() for part in module.split(".")):
            raise RlvrError(f"{module!r} is not a module name")
        private = [part for part in module.split(".") if part.startswith("_")]
        if private:
            raise RlvrError(f"module {module!r} is private ({private[0]!r} starts with _): a recipe names no private "
                            "code")
        if is_standard_library(top):
            raise RlvrError(f"module {module!r} is part of Python's standard library, which a recipe may not "
                            "name (it holds no rewards)")
        for folder, reason in self.folders():
            spec = _find_in(top, folder)
            if spec is not None:
                return CodeSource(module, _spec_path(spec), reason, folder)
        spec = _find_top(top)
        path = _spec_path(spec) if spec is not None else ""
        for name, reason in self.allow_list():
            if _under(module, name):
                if spec is None:  # trl.rewards without TRL: rlvr's extra installs it
                    how = f": {install_line(top)}" if top in EXTRAS else ""
                    raise RlvrError(f"cannot import {module!r}: no module named {top!r} is installed{how}")
                return CodeSource(module, path, reason)
        plugin = (plugin_packages or {}).get(top)
        if plugin is not None and spec is not None:
            raise RlvrError(f"module {module!r} is part of {plugin}, which a recipe names by what they registered "
                            "(`rlvr rewards`, `rlvr tools`, `rlvr environments`, `rlvr tasks`), not by module:function")
        if spec is None:
            raise RlvrError(f"cannot import {module!r}: no module named {top!r} in the recipe's folder, the current "
                            "folder or the installed packages")
        raise RlvrError(f"module {module!r} (at {path or 'no file'}) is not in the recipe's folder or the current "
                        f"folder, not part of an rlvr plugin and not allow-listed: {HOW_TO_ALLOW.format(name=module)}")


def load_callable(source: CodeSource, attr: str) -> Callable[..., Any]:
    """``attr`` of the module :meth:`ImportPolicy.locate` allowed, imported now; refused when it
    is defined in the standard library (a function an allowed module imported from there)."""
    check_function_name(attr)
    module = _import(source)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise RlvrError(f"{source.module!r} has no function {attr!r}"
                        f"{did_you_mean(attr, [n for n in dir(module) if callable(getattr(module, n))])}")
    defined_in, own = _origin(fn)
    if defined_in is None or is_standard_library(defined_in.split(".")[0]):
        raise RlvrError(f"{source.module}:{attr} is {defined_in or 'an unknown module'}'s {attr!r}, which a recipe "
                        "may not name (the standard library holds no rewards)")
    if own.startswith("_"):
        raise RlvrError(f"{source.module}:{attr} is {defined_in}'s private {own!r} under another name: a recipe names "
                        "no private code")
    return fn


def check_function_name(attr: str) -> None:
    """One-line ``RlvrError`` when ``attr``, the function a reference names, is private (starts
    with ``_``) or no name at all; checked before anything is imported."""
    if attr.startswith("_"):
        raise RlvrError(f"{attr!r} is private (it starts with _): a recipe names no private code")
    if not attr.isidentifier():
        raise RlvrError(f"{attr!r} is not a function name")


def _find_in(top: str, folder: Path):
    """The spec of module or package ``top`` in ``folder`` (a file, not a bare namespace folder:
    Python prefers a regular package elsewhere over one)."""
    spec = importlib.machinery.PathFinder.find_spec(top, [str(folder)])
    return spec if spec is not None and spec.origin is not None else None


def _find_top(top: str):
    try:  # a top-level name: finding it runs none of its code
        return importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None


def _origin(fn: Any) -> tuple[str | None, str]:
    """(the module ``fn`` was defined in, or None; the name it was defined with, or ""), through
    ``functools.partial``."""
    while hasattr(fn, "func") and callable(fn.func) and type(fn).__module__ == "functools":  # partial
        fn = fn.func
    module, name = getattr(fn, "__module__", None), getattr(fn, "__name__", "")
    return (module if isinstance(module, str) else None), (name if isinstance(name, str) else "")


def _import(source: CodeSource):
    """The module, with its top-level package loaded from the file :meth:`ImportPolicy.locate`
    found (not whatever comes first on ``sys.path``); its folder is appended to ``sys.path`` so
    that it can import its siblings, and worker processes can import it by name."""
    top = source.module.split(".")[0]
    try:
        if source.folder is not None:
            if str(source.folder) not in sys.path:
                sys.path.append(str(source.folder))
            loaded = sys.modules.get(top)
            if loaded is None:
                spec = _find_in(top, source.folder)
                loaded = importlib.util.module_from_spec(spec)
                sys.modules[top] = loaded
                try:
                    spec.loader.exec_module(loaded)
                except BaseException:
                    del sys.modules[top]
                    raise
            else:
                where = _spec_path(loaded.__spec__) if loaded.__spec__ is not None else ""
                if os.path.realpath(where) != os.path.realpath(source.path):
                    raise RlvrError(f"cannot import {source.module!r} from {source.path}: a module {top!r} is "
                                    f"already loaded from {where or 'elsewhere'}; rename one of them")
        return importlib.import_module(source.module)
    except RlvrError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever importing the user's module raises
        raise RlvrError(f"cannot import {source.module!r}: {one_line(exc)}") from None
