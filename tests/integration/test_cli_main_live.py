"""The `rlvr` command: the checks that start worker pools or loopback services, or build a tiny
model in-process (the integration ring; the others: tests/e2e/test_cli_main.py,
tests/unit/test_cli_main_pure.py)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli_main import write_records, listing, _interrupt_score

ROOT = Path(__file__).resolve().parents[2]


def test_light_commands_do_not_import_torch():
    code = (
        "import sys\n"
        "from rlvr.cli.main import cli\n"
        "for args in (['plugins', '--json'], ['validate', 'tasks/gsm8k.yaml'], ['--help']):\n"
        "    try:\n"
        "        cli(args, standalone_mode=False)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = [m for m in ('torch', 'vllm', 'deepspeed', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr





@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_score_stops_within_a_second_on_a_signal_leaving_nothing(plugged, plugin_env, tmp_path, sig, status):
    src = write_records(tmp_path / "in.jsonl", 2000)
    command = ["score", "--reward", "slow", "--option", "delay=30", "--input", src, "--batch-size", "10"]
    code, took, _ = _interrupt_score(command, plugin_env, tmp_path, sig)
    assert code == status and took < 1.0, (code, took)


def test_score_output_through_a_link_to_stdout_streams(plugged, tmp_path):
    """What /dev/stdout is (a symlink to /proc/self/fd/1): written to, the link left alone; as
    root the old code replaced the system's /dev/stdout with a regular file."""
    src = write_records(tmp_path / "in.jsonl", 2)
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    out = plugged("score", "--reward", "needy", "--input", src, "--output", link)
    assert out.returncode == 0, out.stderr
    assert [json.loads(x)["reward"] for x in out.stdout.splitlines()] == [1.0, 1.0]
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    assert listing(tmp_path) == ["in.jsonl", "stdout"]


LEAVER = """
import atexit, sys, threading, time
from pathlib import Path
from rlvr.cli.common import leave

out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit").write_text("ran"))
def late():
    time.sleep(0.5)
    (out / "thread").write_text("finished")
threading.Thread(target=late).start()  # not a daemon: an exit waits for it
sys.stdout.write("buffered, not yet flushed")
code = {"3": 3, "none": None, "message": "rlvr: gone"}[sys.argv[2]]
leave(code)
"""


@pytest.mark.parametrize("code, status", [("3", 3), ("none", 0), ("message", 1)])
def test_leave_exits_as_sys_exit_would_after_threads_and_atexit(tmp_path, code, status):
    """rlvr.cli.common.leave, which ends every `rlvr` command without the interpreter's
    teardown: the status sys.exit would give, non-daemon threads finished, atexit handlers run,
    standard output flushed."""
    done = subprocess.run([sys.executable, "-c", LEAVER, str(tmp_path), code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == status, done.stderr
    assert (tmp_path / "atexit").read_text() == "ran" and (tmp_path / "thread").read_text() == "finished"
    assert done.stdout == "buffered, not yet flushed"
    assert done.stderr == ("rlvr: gone\n" if code == "message" else "")
