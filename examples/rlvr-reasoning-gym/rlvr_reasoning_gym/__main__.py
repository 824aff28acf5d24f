"""``python -m rlvr_reasoning_gym``: list reasoning-gym's datasets; with a NAME, its config and a sample."""

from __future__ import annotations

import dataclasses
import sys

from rlvr import RlvrError

from . import check_name, dataset_names, reasoning_gym_task, rg_datasets


def main(argv: list[str]) -> int:
    if not argv:
        datasets = rg_datasets()
        for name in dataset_names():
            module = datasets[name][0].__module__.split(".")
            print(f"{name:<30} {module[1] if len(module) > 2 else ''}")
        print(f"{len(dataset_names())} datasets; `python -m rlvr_reasoning_gym NAME` shows one", file=sys.stderr)
        return 0
    try:
        name = check_name(argv[0], "rlvr_reasoning_gym")
    except RlvrError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    config_cls = rg_datasets()[name][1]
    print(f"{name}: config keys (task option config: {{key: value}})")
    for field in dataclasses.fields(config_cls):
        if field.name in ("size", "seed"):
            continue
        default = field.default if field.default is not dataclasses.MISSING else (
            field.default_factory() if field.default_factory is not dataclasses.MISSING else "required"
        )
        print(f"  {field.name} = {default!r}")
    row = next(iter(reasoning_gym_task("train", data_dir=None, dataset=name, size=1)))
    print(f"\nquestion:\n{row['question']}\n\nanswer: {row['answer']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
