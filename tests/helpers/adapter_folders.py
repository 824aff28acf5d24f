"""Adapter and model folders as files only (nothing in them loads), for the checks on what
`--model FOLDER` accepts: tests/unit/test_models_adapters.py, tests/integration/test_models_adapter_copies.py."""

from __future__ import annotations

import json
from pathlib import Path


def adapter(folder: Path, base: str | None = "org/base", peft_base: str | None = None, weights=True) -> Path:
    """A PEFT adapter folder whose rlvr note names ``base`` (none: no note) and whose
    adapter_config.json names ``peft_base``; its weights file empty, or none."""
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": peft_base}))
    if base is not None:
        (folder / "rlvr_adapter.json").write_text(json.dumps({"base": base}))
    if weights:
        (folder / "adapter_model.safetensors").write_bytes(b"")
    return folder


def model_folder(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    return folder
