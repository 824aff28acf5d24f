"""What tests/e2e/test_sampling_server_options_runs.py, tests/integration/test_sampling_server_options_live.py, tests/unit/test_sampling_server_options.py share."""

from __future__ import annotations

import sys


SAMPLER_RECIPE = """
name: far
task: {name: arithmetic, options: {size: 8}}
prompt: {template: "{{question}}", system: "Reply with only the number."}
rewards: {math: 1.0}
model: {name: MODEL}
sampling: {num_generations: 4, max_tokens: 48, cpu_kvcache_gib: 3, gpu_memory_utilization: 0.4, dtype: float32}
trainer: {rollout_batch_size: 16, micro_batch_size: 4, seed: 11}
eval: {task: {name: arithmetic, options: {size: 4, terms: 6}}, max_tokens: 100}
profiles: {wide: {sampling: {max_tokens: 64}}}
"""


def rlvr(*args):
    from click.testing import CliRunner

    from rlvr.cli.main import cli

    return CliRunner().invoke(cli, [str(a) for a in args])


def printed(result) -> tuple[list[str], list[str], dict[str, str], list[str]]:
    """(the printed line's parts, names it unsets, values it sets, the command)."""
    import shlex

    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert len(result.stdout.strip().splitlines()) == 1, result.stdout
    parts = shlex.split(result.stdout)
    assert parts[0] == "env"
    unset, assigned, i = [], {}, 1
    while parts[i] == "-u":
        unset.append(parts[i + 1])
        i += 2
    while "=" in parts[i] and parts[i] != sys.executable:
        name, _, value = parts[i].partition("=")
        assigned[name] = value
        i += 1
    return parts, unset, assigned, parts[i:]
