"""The smallest valid recipe, which tests override field by field (tests/test_recipe_load.py,
test_sampling_server_options.py, test_training_loss_variants.py); and the secret files the shipped
recipes name, for checking them."""

import re
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[2] / "tasks"

BASE = """
name: t
task: {name: arithmetic, options: {size: 10}}
prompt: {template: "{{question}}"}
rewards: {math: 1.0}
sampling: {num_generations: 4}
trainer: {rollout_batch_size: 16, micro_batch_size: 4}
"""


def shipped_recipe_secrets(folder: Path) -> Path:
    """``folder``, holding every secret file a shipped recipe names (``secret_file:``, relative to
    the folder a run starts from, as tasks/judge_demo.yaml's ``runs/judge-sampler.secret``, which
    its user makes for the judge's sampler): a service's options are checked by reading the
    secret, so ``rlvr validate`` refuses a recipe whose secret file is not there."""
    for recipe in sorted(SHIPPED.glob("*.yaml")):
        for name in re.findall(r"^\s*secret_file:\s*(\S+)", recipe.read_text(), re.M):
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("a-test-secret-of-32-characters-x\n")
            path.chmod(0o600)
    return folder
