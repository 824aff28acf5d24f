"""Server mode: vLLM in a process of its own, weights by collective broadcast (rlvr.server,
rlvr.weight_sync). Tiny random-init model on CPU."""

import os
import signal
import subprocess
import time

import pytest

from conftest import RLVR
from test_engine import (  # noqa: F401 - test_plugin is a fixture
    assert_sampler_holds_trainer_weights, make_run, rows, test_plugin, train_two_ranks, train_two_steps)

pytestmark = pytest.mark.slow  # every test here starts vLLM


def sampler_pids(out_dir) -> list[int]:
    """Processes of this run's sampler (vLLM's server and its children): those whose environment
    carries the test's RLVR_TEST_RUN marker, other than the trainer (gone by then)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if f"RLVR_TEST_RUN={out_dir}".encode() in env:
            found.append(int(pid))
    return found


def _start(recipe, out, env, *sets):
    cmd = [RLVR, "train", recipe, "--output-dir", out] + [arg for kv in sets for arg in ("--set", kv)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_rows(out, count, proc, deadline_s=600):
    end = time.time() + deadline_s
    while time.time() < end and proc.poll() is None:
        if (out / "metrics.jsonl").exists() and len((out / "metrics.jsonl").read_text().splitlines()) >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"no {count} rows: {proc.poll()} {proc.stderr.read()[-2000:] if proc.poll() is not None else ''}")


def _server_pid(out) -> int:
    """The sampler's API server: the process of this run whose parent is not of this run."""
    pids = sampler_pids(out)
    for pid in pids:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"vllm.entrypoints.openai.api_server" in f.read():
                return pid
    raise AssertionError(f"no sampler among {pids}")


@pytest.mark.parametrize("fault", ["kill"])  # a hang's deadline: tests/test_server_options.py, no vLLM
def test_sampler_that_dies_or_hangs_stops_the_run_with_one_line(tmp_path, tiny_model, test_plugin, fault):
    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="vllm", steps=50)
    out = tmp_path / "run"
    env["RLVR_TEST_RUN"] = str(out)
    proc = _start(recipe, out, env, "sampling.mode=server", "sampling.server.timeout_s=15")
    try:
        _wait_rows(out, 1, proc)
        server = _server_pid(out)
        os.kill(server, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        t0 = time.time()
        _, err = proc.communicate(timeout=180)
        took = time.time() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in sampler_pids(out):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert proc.returncode != 0
    lines = [ln for ln in err.splitlines() if ln.startswith("rlvr: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert "sampler" in lines[0] and str(out / "sampler-0.log") in lines[0] or "sampling.server.timeout_s" in lines[0], lines[0]
    if fault == "kill":
        assert "exited with status -9" in lines[0], lines[0]
    else:
        assert "did not answer within 15 s" in lines[0] and 10 < took < 120, (took, lines[0])
    time.sleep(1)
    assert sampler_pids(out) == []  # nothing left behind: not the API server, not vLLM's engine


def test_kill_9_of_the_trainer_takes_the_sampler_with_it_and_resume_goes_on(tmp_path, tiny_model, test_plugin):
    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="vllm", steps=4)
    out = tmp_path / "run"
    env["RLVR_TEST_RUN"] = str(out)
    proc = _start(recipe, out, env, "sampling.mode=server", "sampling.max_staleness=1")
    _wait_rows(out, 2, proc)
    os.killpg(proc.pid, signal.SIGKILL)  # the trainer's own group only: the sampler has its own session
    proc.wait()
    end = time.time() + 30
    while sampler_pids(out) and time.time() < end:
        time.sleep(0.2)
    assert sampler_pids(out) == []
    done = subprocess.run([RLVR, "train", recipe, "--output-dir", out, "--resume", "--set", "sampling.mode=server",
                           "--set", "sampling.max_staleness=1"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["step"] for r in rows(out)] == [0, 1, 2, 3]
    assert all(r["staleness"] <= 1 for r in rows(out))


def test_two_ranks_share_one_sampler(tmp_path, tiny_model, test_plugin):
    """Two trainer ranks (gloo, ZeRO-3: the weights are gathered a bucket at a time on both
    ranks) send their prompts to the one sampler rank 0 started; rank 0 broadcasts the weights,
    the sampler is paused while they change, and both ranks' samples come from the new ones."""
    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="vllm", zero=3)
    out = tmp_path / "run"
    metrics = train_two_ranks(recipe, out, {**env, "RLVR_TEST_RUN": str(out)}, 29517, "sampling.mode=server",
                              "sampling.sync_bucket_mb=1")
    assert_sampler_holds_trainer_weights(metrics)  # both ranks' samples (reduced over ranks)
    assert list(out.glob("sampler-*.log")) == [out / "sampler-0.log"]
    assert sampler_pids(out) == []


def test_two_ranks_colocated_vllm_engines_sync_by_broadcast(tmp_path, tiny_model, test_plugin):
    """sampling.mode: colocate with two ranks: each rank's vLLM engine runs in a child process
    and takes the weights by gloo broadcast (no files); its samples come from the new weights."""
    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="vllm")
    metrics = train_two_ranks(recipe, tmp_path / "run", env, 29519, "sampling.cpu_kvcache_gib=1",
                              "sampling.gpu_memory_utilization=0.1")
    assert_sampler_holds_trainer_weights(metrics)


def long_system_prompt(recipe) -> None:
    """Prompts over one key/value block (128 tokens on CPU), so vLLM's prefix cache holds
    their shared start between steps: after a weight sync it must be dropped."""
    text = recipe.read_text()
    short = 'system: "Answer in \\\\boxed{}."'
    assert short in text
    recipe.write_text(text.replace(short, 'system: "Answer in \\\\boxed{}.' + " Check every digit twice." * 40 + '"'))


@pytest.fixture(scope="module")
def hand_started(tmp_path_factory, tiny_model, test_plugin):
    """One `rlvr sampler RECIPE --port P`, started by hand and shared by the tests below that
    name it in sampling.server.urls (each vLLM start costs about half a minute)."""
    import requests

    from rlvr.weight_sync import free_port

    root = tmp_path_factory.mktemp("hand")
    recipe, env = make_run(root, tiny_model, test_plugin, backend="vllm")
    long_system_prompt(recipe)
    port, log = free_port(), root / "sampler.log"
    sampler = subprocess.Popen([RLVR, "sampler", recipe, "--host", "127.0.0.1", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=open(log, "w"), start_new_session=True)
    try:
        end = time.time() + 300
        while True:
            assert sampler.poll() is None and time.time() < end, log.read_text()[-2000:]
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(1)
        yield sampler, f"sampling.server.urls=[http://127.0.0.1:{port}]"
    finally:
        os.killpg(sampler.pid, signal.SIGTERM)
        sampler.wait(60)


def test_a_sampler_started_by_hand_serves_a_run_named_in_urls(tmp_path, tiny_model, test_plugin, hand_started):
    """`rlvr sampler` in one process, `rlvr train` with sampling.server.urls in another: the run
    uses it (weights synced into it, samples from them) and leaves it running."""
    sampler, urls = hand_started
    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="vllm")
    long_system_prompt(recipe)  # the sampler's prefix cache must not outlive a weight sync
    out = tmp_path / "run"
    metrics = train_two_steps(recipe, out, env, "sampling.mode=server", urls)
    assert_sampler_holds_trainer_weights(metrics)
    assert not list(out.glob("sampler-*.log")) and sampler.poll() is None  # not ours to start or stop


def test_server_mode_matches_colocated_when_synchronous(tmp_path, tiny_model, test_plugin, hand_started):
    """max_staleness 0: the same seed draws the same samples in both modes, so the same losses,
    gradient norms and rewards (the sampler is the same vLLM engine, only in another process)."""
    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="vllm")
    env["RLVR_TEST_RUN"] = str(tmp_path / "server")
    both = {}
    for mode in ("colocate", "server"):
        out = tmp_path / mode
        train_two_steps(recipe, out, env, f"sampling.mode={mode}", "algorithm.ppo_epochs=1")
        both[mode] = rows(out)
    # the sampler held the trainer's weights and dtype after every sync: weights 1, mismatch ~0
    assert_sampler_holds_trainer_weights(both["server"])
    assert all(r["time_sync"] > 0 for r in both["server"])
    assert (tmp_path / "server" / "sampler-0.log").exists()
    assert sampler_pids(tmp_path / "server") == []  # stopped at the end of the run
    keys = ("reward_mean", "completion_len_mean", "grad_norm", "loss", "kl", "entropy")
    for a, b in zip(both["colocate"], both["server"]):
        for key in keys:
            if key in a:
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (key, a[key], b[key])
