"""Server mode's settings and process set-up, without starting vLLM: the checks that start worker
pools or loopback services, or build a tiny model in-process (the integration ring; the others:
tests/e2e/test_sampling_server_options_runs.py, tests/unit/test_sampling_server_options.py)."""

from __future__ import annotations

import json
import sys

from helpers.sampling_server_options import rlvr, printed



def test_the_printed_line_runs_in_a_shell_with_the_sampler_environment(sampler_recipe, monkeypatch):
    import shlex
    import subprocess

    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("RLVR_TEST_KEEP", "yes")
    result = rlvr("sampler", sampler_recipe, "--print-command")
    command = printed(result)[3]
    line = result.stdout.strip()
    assert line.endswith(shlex.join(command))
    probe = shlex.join([sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"])
    ran = subprocess.run(["bash", "-c", line[: -len(shlex.join(command))] + probe], capture_output=True, text=True,
                         check=True)
    env = json.loads(ran.stdout)
    assert "RANK" not in env and env["RLVR_TEST_KEEP"] == "yes"
    assert env["VLLM_SERVER_DEV_MODE"] == "1"


def test_sampler_help_does_not_import_torch():
    import subprocess

    code = ("import sys\nfrom rlvr.cli.main import cli\ntry:\n    cli(['sampler', '--help'], standalone_mode=False)\n"
            "except SystemExit:\n    pass\nassert 'torch' not in sys.modules and 'transformers' not in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "--print-command" in out.stdout
