"""What tests/e2e/test_cli_untrusted_input_runs.py, tests/unit/test_cli_untrusted_input.py share."""

from __future__ import annotations

import os
import pickle
from pathlib import Path


def alias_bomb(levels: int = 9) -> str:
    """The "billion laughs": nine aliases of nine aliases, ``levels`` deep (9^9 strings at 9)."""
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    names = "abcdefghijklmnopqrstuvwxyz"
    for level in range(1, levels):
        lines.append(f"{names[level]}: &{names[level]} [" + ", ".join([f"*{names[level - 1]}"] * 9) + "]")
    return "\n".join(lines) + "\n"


class _RunsACommand:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def pickled_model_folder(tmp_path: Path) -> tuple[Path, Path]:
    from transformers import LlamaConfig

    folder, marker = tmp_path / "pickled", tmp_path / "unpickled"
    LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1).save_pretrained(folder)
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"weights": _RunsACommand(marker)}))
    return folder, marker
