"""What tests/e2e/test_cli_main.py, tests/integration/test_cli_main_live.py, tests/unit/test_cli_main_pure.py share."""

import json
import os
import subprocess
import time
from pathlib import Path

from helpers import RLVR


# ----------------------------------------------------------------- promises: exit 2, one line, nothing damaged
TEST_PLUGIN = '''
import time

from rlvr import Score, hookimpl


def weird(prompts, completions, completion_ids):
    """1.0, explained with values JSON cannot hold."""
    return [Score(1.0, {"x": object(), "nan": float("nan"), "ok": [1, "two"]}) for _ in completions]


def slow(prompts, completions, completion_ids, *, delay: float = 0.2):
    """1.0 after sleeping `delay` seconds per batch."""
    time.sleep(delay)
    return [1.0] * len(completions)


def needy(prompts, completions, completion_ids, *, answer):
    """1.0 when the completion equals the answer column."""
    return [float(c == a) for c, a in zip(completions, answer)]


def costly(prompts, completions, completion_ids):
    """0.5, with what each record cost."""
    return [Score(0.5, {}, {"requests": 1, "tokens": len(c), "seconds_max": len(c) / 10, "seconds_mean": len(c)})
            for c in completions]


def broken(split, *, data_dir):
    """A loader whose data file is missing."""
    raise FileNotFoundError("no such file: /data/broken.jsonl\\nsecond line")
    yield


@hookimpl
def rlvr_register_rewards(register):
    register("weird", weird)
    register("slow", slow)
    register("needy", needy)
    register("costly", costly)


@hookimpl
def rlvr_register_tasks(register):
    register("broken", broken, columns=["question", "answer"])
'''


TYPO_PLUGIN = '''
from rlvr import hookimpl


@hookimpl
def rlvr_register_reward(register):  # missing "s"
    pass
'''


BADARG_PLUGIN = '''
from rlvr import hookimpl


@hookimpl
def rlvr_register_rewards(registr):  # not the spec's argument name
    pass
'''


def write_records(path, n, **extra):
    path.write_text("".join(json.dumps({"completion": f"c{i}", "answer": f"c{i}", **extra}) + "\n" for i in range(n)))
    return path


def listing(folder):
    return sorted(p.name for p in folder.iterdir())


def _children(pid: int) -> list[int]:
    kids = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat_file.parent.name))
    return kids


def _interrupt_score(command, env, tmp_path, sig, *, ready_after: float = 0.0):
    """Start `rlvr score` on a large input, wait until its temporary output exists (and
    ``ready_after`` more seconds), send ``sig``; return (exit status, seconds to exit, children)."""
    dst = tmp_path / "out.jsonl"
    dst.write_text("precious\n")
    proc = subprocess.Popen([RLVR, *map(str, command), "--output", str(dst)], env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not [p for p in tmp_path.iterdir() if p.name.startswith(".out.jsonl.")]:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no temporary output appeared"
            time.sleep(0.02)
        time.sleep(ready_after)
        children = _children(proc.pid)
        sent = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert dst.read_text() == "precious\n"
    assert listing(tmp_path) == ["in.jsonl", "out.jsonl"], listing(tmp_path)
    assert err.strip().splitlines()[-1] == "rlvr: interrupted", err
    return proc.returncode, took, children
