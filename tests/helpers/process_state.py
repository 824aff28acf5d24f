"""The rule that a test module leaves the test process as it found it: torch's thread counts,
default dtype, float32 matmul precision and grad mode are process-wide, and a module that
changes them (``torch.set_num_threads(1)`` at import, say) changes the float rounding of every
test after it, so that a test passes alone and fails in the suite. Checked where one module's
tests end (their module fixtures torn down): the first module that leaves a change is named.

tests/conftest.py loads this module as a plugin."""

from __future__ import annotations

import sys

import pytest


def snapshot() -> dict | None:
    """The process-wide torch settings that change results, or None before torch is imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return {"torch.get_num_threads()": torch.get_num_threads(),
            "torch.get_num_interop_threads()": torch.get_num_interop_threads(),
            "torch.get_default_dtype()": torch.get_default_dtype(),
            "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
            "torch.is_grad_enabled()": torch.is_grad_enabled()}


def changes(before: dict | None, after: dict | None) -> list[str]:
    """``name: before -> after`` for each setting that differs (none when torch was not loaded
    before: importing it is no change)."""
    if before is None or after is None:
        return []
    return [f"{k}: {before[k]} -> {after[k]}" for k in before if before[k] != after[k]]


_BEFORE: dict[str, dict | None] = {}  # module node id -> the settings before it was imported


def _module_id(nodeid: str) -> str:
    return nodeid.split("::")[0]


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    if isinstance(collector, pytest.Module):
        import torch  # noqa: F401 - loaded before any test module, so the first one's import is seen too

        _BEFORE.setdefault(_module_id(collector.nodeid), snapshot())
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    module = _module_id(item.nodeid)
    if nextitem is None or _module_id(nextitem.nodeid) != module:
        found = changes(_BEFORE.get(module), snapshot())
        if found:
            raise AssertionError(f"{module} changed process-wide torch settings for the tests after it "
                                 f"({'; '.join(found)}): restore them where the module's tests end")
    return result
