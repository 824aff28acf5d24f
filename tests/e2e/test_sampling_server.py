"""Server mode: vLLM in a process of its own, weights by collective broadcast (rlvr.sampling.server,
rlvr.sampling.transfer). Tiny random-init model on CPU."""

import os
import signal
import subprocess
import time

import pytest

from helpers import RLVR, wait_until
from helpers.runs import (
    assert_sampler_holds_trainer_weights, make_run, rows, sampler_pids, train_two_ranks, train_two_steps)

from rlvr.sampling.auth import ROUTES, SECRET_ENV, auth_headers

pytestmark = pytest.mark.longer(600, reason="each test starts vLLM's server and trains through it, some twice (60-140 s alone)")

HAND_SECRET = "the-hand-started-samplers-secret"


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


@pytest.mark.parametrize("fault", ["kill"])  # a hang's deadline: tests/unit/test_sampling_server_options.py, no vLLM
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
    wait_until(lambda: not sampler_pids(out))
    assert sampler_pids(out) == []  # nothing left behind: not the API server, not vLLM's engine


def test_kill_9_of_the_trainer_takes_the_sampler_with_it_and_resume_goes_on(tmp_path, tiny_model, test_plugin,
                                                                           hand_started):
    """The run's own sampler dies with a trainer killed by SIGKILL; --resume goes on from the
    last checkpoint, here through the hand-started sampler (sampling.server.urls: a sampler
    start fewer; a resumed run starting its own is test_two_ranks_share_one_sampler's start)."""
    _, urls = hand_started
    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="vllm", steps=4)
    out = tmp_path / "run"
    env["RLVR_TEST_RUN"] = str(out)
    proc = _start(recipe, out, env, "sampling.mode=server", "sampling.max_staleness=1")
    _wait_rows(out, 2, proc)
    os.killpg(proc.pid, signal.SIGKILL)  # the trainer's own group only: the sampler has its own session
    proc.wait()
    wait_until(lambda: not sampler_pids(out))
    assert sampler_pids(out) == []
    done = subprocess.run([RLVR, "train", recipe, "--output-dir", out, "--resume", "--set", "sampling.mode=server",
                           "--set", "sampling.max_staleness=1", "--set", urls], env={**env, SECRET_ENV: HAND_SECRET},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["step"] for r in rows(out)] == [1, 2, 3, 4]
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
    and takes the weights by gloo broadcast (no files); its samples come from the new weights.
    (Server mode's tests here take the default on CPU, shared buffers: both ways are tested.)"""
    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="vllm")
    metrics = train_two_ranks(recipe, tmp_path / "run", env, 29519, "sampling.cpu_kvcache_gib=1",
                              "sampling.gpu_memory_utilization=0.1", "sampling.sync_transport=broadcast")
    assert_sampler_holds_trainer_weights(metrics)


def long_system_prompt(recipe) -> None:
    """Prompts over one key/value block (128 tokens on CPU), so vLLM's prefix cache holds
    their shared start between steps: after a weight sync it must be dropped."""
    text = recipe.read_text()
    short = 'system: "Answer in \\\\boxed{}."'
    assert short in text
    recipe.write_text(text.replace(short, 'system: "Answer in \\\\boxed{}.' + " Check every digit twice." * 40 + '"'))


FRONT_FILES = 512  # the hand-started sampler's open-file limit: its front door's caps follow from it


def _few_files():
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (FRONT_FILES, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


@pytest.fixture(scope="session")
def hand_started(tmp_path_factory, tiny_model, test_plugin):
    """One `rlvr sampler RECIPE --port P`, started by hand and shared by the tests below that
    name it in sampling.server.urls (a sampler takes 40-60 s to start). For the session, not the
    module: a worker that runs this module's tests in two stretches (pytest-xdist hands out and
    steals tests) starts it once, not once a stretch."""
    import requests

    from rlvr.models.distributed import free_port

    root = tmp_path_factory.mktemp("hand")
    recipe, env = make_run(root, tiny_model, test_plugin, backend="vllm")
    long_system_prompt(recipe)
    port, log, terminal = free_port(), root / "sampler.log", root / "terminal.log"
    sampler = subprocess.Popen([RLVR, "sampler", recipe, "--port", str(port), "--log-file", log],
                               env={**env, SECRET_ENV: HAND_SECRET}, stdout=subprocess.DEVNULL,
                               stderr=open(terminal, "w"), start_new_session=True, preexec_fn=_few_files)
    try:
        end = time.time() + 300
        while True:
            assert sampler.poll() is None and time.time() < end, \
                (terminal.read_text() + (log.read_text() if log.exists() else ""))[-2000:]
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", headers=auth_headers(HAND_SECRET),
                                timeout=2).status_code == 200:
                    # a quiet terminal: one line saying where it listens and where its output goes
                    assert terminal.read_text().splitlines() == [
                        f"rlvr: sampler for tiny on port {port}; trainers name it in sampling.server.urls as "
                        f"http://127.0.0.1:{port}; its output goes to {log}"], terminal.read_text()[-2000:]
                    assert "vLLM" in log.read_text() or "vllm" in log.read_text()
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
    env[SECRET_ENV] = HAND_SECRET  # the trainer's requests carry the secret the sampler was started with
    long_system_prompt(recipe)  # the sampler's prefix cache must not outlive a weight sync
    out = tmp_path / "run"
    metrics = train_two_steps(recipe, out, env, "sampling.mode=server", urls)
    assert_sampler_holds_trainer_weights(metrics)
    assert not list(out.glob("sampler-*.log")) and sampler.poll() is None  # not ours to start or stop


def test_a_lora_run_syncs_the_adapted_modules_into_a_sampler_it_did_not_start(tmp_path, tiny_model, test_plugin,
                                                                               hand_started):
    """LoRA in server mode: the first sync is whole (the sampler named in urls may hold another
    run's weights: the tests before this one leave theirs), the later ones only the modules that
    hold adapters, merged as they go, in buckets that say so. After each the sampler holds the
    trainer's weights: importance weights 1, mismatch ~0 (a sync that left out the attention
    modules measured 0.045). That vLLM says nothing of the layers not sent: the child engines of
    tests/e2e/test_training_engine.py's sync check, whose log is read whole."""
    _, urls = hand_started
    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="vllm")
    env[SECRET_ENV] = HAND_SECRET
    metrics = train_two_steps(recipe, tmp_path / "run", env, "sampling.mode=server", urls,
                              "model.lora={r: 8, alpha: 16, target_modules: [q_proj, v_proj]}", "trainer.lr=0.05")
    assert_sampler_holds_trainer_weights(metrics)
    assert metrics[0]["grad_norm"] > 0 and metrics[1]["time_sync"] > 0


def test_server_mode_matches_colocated_when_synchronous(tmp_path, tiny_model, test_plugin, hand_started):
    """Two steps with vLLM colocated (in the trainer's process), then the same in server mode at
    max_staleness 0: the same seed draws the same samples in both modes, so the same losses,
    gradient norms and rewards (the sampler is the same vLLM engine, only in another process: the
    hand-started one, whose weights the run replaces before its first step; each request carries
    its own seed). A sampler the run starts and stops itself: test_two_ranks_share_one_sampler and
    tests/e2e/test_models_distributed.py."""
    _, urls = hand_started
    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="vllm")
    env[SECRET_ENV] = HAND_SECRET
    both = {}
    for mode, sets in (("colocate", ["sampling.mode=colocate"]), ("server", ["sampling.mode=server", urls])):
        out = tmp_path / mode
        train_two_steps(recipe, out, env, *sets, verbose=mode == "colocate")
        both[mode] = rows(out)
        # either sampler held the trainer's weights and dtype (float32, pinned in RECIPE) after
        # every sync, and vLLM's log-probs came back with every sample: weights 1, mismatch ~0
        assert_sampler_holds_trainer_weights(both[mode])
        assert all(r["time_sync"] > 0 for r in both[mode])
    # the colocated engine's reloads leave the rotary cache and the tied head as they are, and say nothing of it
    assert "Failed to load weights" not in (tmp_path / "colocate" / "train.log").read_text()
    keys = ("reward_mean", "completion_len_mean", "grad_norm", "loss", "kl", "entropy")
    for a, b in zip(both["colocate"], both["server"]):
        for key in keys:
            if key in a:
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6, nan_ok=True), (key, a[key], b[key])


# ---- closed to strangers: a real sampler (the hand-started one) and requests from outside the run ----

# Routes vLLM's server opens in dev mode (or always) that rlvr does not use: none may answer.
NOT_RLVRS = [("POST", "/collective_rpc"), ("POST", "/sleep"), ("POST", "/wake_up"), ("GET", "/server_info"),
             ("POST", "/abort_requests"), ("POST", "/reset_prefix_cache"), ("GET", "/is_paused"),
             ("POST", "/shutdown_weight_transfer_engine"), ("GET", "/v1/models"),
             ("GET", "/metrics"), ("GET", "/docs"), ("GET", "/openapi.json"), ("GET", "/version"), ("POST", "/tokenize"),
             ("POST", "/ping"), ("POST", "/invocations"), ("GET", "/load"), ("POST", "/start_profile")]


def _greedy(url: str, secret: str) -> list[int]:
    import requests

    body = {"model": "policy", "prompt": [1, 2, 3, 4, 5], "max_tokens": 8, "temperature": 0.0, "return_token_ids": True}
    response = requests.post(url + "/v1/completions", json=body, headers=auth_headers(secret), timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["token_ids"]


def test_a_sampler_refuses_every_route_without_the_secret_and_answers_only_rlvrs(hand_started):
    """Every route rlvr uses, and every other route vLLM opens: 401 without the run's secret or
    with a wrong one (nothing done, nothing told); with it, 404 for the routes rlvr does not use.
    The sampler keeps serving afterwards: no stranger paused it, shut it down or changed it."""
    import requests

    sampler, urls = hand_started
    url = urls.split("[", 1)[1].rstrip("]")
    before = _greedy(url, HAND_SECRET)
    strangers = [{}, auth_headers("not-the-secret-of-this-run"), {"Authorization": HAND_SECRET},
                 {"Authorization": f"Basic {HAND_SECRET}"}, auth_headers(HAND_SECRET + "x")]
    bodies = {"/pause": None, "/collective_rpc": {"method": "shutdown"}, "/v1/completions": {"model": "policy", "prompt": "a"}}
    for method, path in sorted(ROUTES) + NOT_RLVRS:
        for headers in strangers:
            response = requests.request(method, url + path, headers=headers, json=bodies.get(path), timeout=30,
                                        params={"mode": "wait"} if path == "/pause" else None)
            assert response.status_code == 401, (method, path, headers, response.status_code, response.text[:200])
            assert "policy" not in response.text and "vllm" not in response.text.lower()
    for method, path in NOT_RLVRS:
        response = requests.request(method, url + path, headers=auth_headers(HAND_SECRET), json=bodies.get(path),
                                    timeout=30)
        assert response.status_code == 404, (method, path, response.status_code, response.text[:200])
    assert sampler.poll() is None
    assert requests.get(url + "/health", headers=auth_headers(HAND_SECRET), timeout=30).status_code == 200
    assert _greedy(url, HAND_SECRET) == before  # not paused (this would wait), not changed


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_judge_on_a_real_rlvr_sampler(hand_started, api):
    """The ``judge`` reward (plugins/judge_reward.py) against `rlvr sampler`, behind its secret, by
    either route (chat, the judge's default, renders the model's chat template): the judge's
    requests are let in and answered (usage counted), and what a random model writes is parsed or
    None as unparseable, never an exception; without the secret the sampler refuses it (401)."""
    from helpers.loopback import user_secret
    from rlvr_plugins.judge_reward import judge_reward

    _, urls = hand_started
    url = urls.split("[", 1)[1].rstrip("]")
    port = url.rsplit(":", 1)[1]
    base = {"base_url": f"{url}/v1", "api": api, "model": "policy", "rubric": "{{completion}} Score:",
            "max_tokens": 8, "timeout_s": 120, "retries": 0}
    os.environ["JUDGE_SAMPLER_KEY"] = HAND_SECRET
    try:
        with user_secret(base["base_url"], secret_env="JUDGE_SAMPLER_KEY"):
            out = judge_reward(["2+2?", "3+3?"], ["4", "6"], [None, None], **base)
    finally:
        os.environ.pop("JUDGE_SAMPLER_KEY", None)
    for s in out:
        assert s.info.get("usage", {}).get("completion_tokens", 0) >= 1, s.info  # authorised, answered, counted
        assert (s.value is not None and 0 <= s.value <= 1) or s.info["why"].startswith("unparseable"), s.info
    refused = judge_reward(["2+2?"], ["4"], [None], **base)  # no key
    assert refused[0].value is None and refused[0].info["why"].startswith("HTTP 401"), refused[0].info
    assert refused[0].info["why"].endswith(f"no secret was sent: the user gives one for this host with --secret "
                                           f"127.0.0.1:{port}=FILE (or RLVR_SECRETS)"), refused[0].info


def test_a_second_process_cannot_push_weights(hand_started, tiny_model):
    """rlvr's own broadcaster, pointed at the sampler by a process without the run's secret: the
    sampler refuses to join its group and keeps its weights (a zeroed final norm would change the
    greedy answer)."""
    import torch

    from rlvr import RlvrError
    from rlvr.sampling.server import SamplerHTTP
    from rlvr.sampling.transfer.sender import WeightSender

    sampler, urls = hand_started
    url = urls.split("[", 1)[1].rstrip("]")
    before = _greedy(url, HAND_SECRET)
    stranger = WeightSender([SamplerHTTP(url, "a-guess-at-the-secret-0123", 30)], [1], timeout_s=30)
    with pytest.raises(RlvrError, match="refused rlvr's secret"):
        stranger.send([("model.norm.weight", torch.zeros(128))])
    stranger.close()
    assert _greedy(url, HAND_SECRET) == before and sampler.poll() is None


# ---- strangers who only connect: the front door (rlvr.sampling.front) while the owner trains ----

def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _vllm_server(front: int) -> int:
    """vLLM's API server: the front door's child."""
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if parent == front and b"vllm.entrypoints.openai.api_server" in f.read():
                    return int(pid)
        except (OSError, ValueError):
            continue
    raise AssertionError(f"no vLLM server under {front}")


class Strangers:
    """What a stranger without the secret can do to the sampler's port, at once and over and
    over until ``stop()``: hold ``idle`` connections that send nothing and ``slow`` ones that send
    a header line every half second (both reopened as the sampler closes them), and send one
    header that never ends (up to 256 MiB)."""

    def __init__(self, port: int, idle: int, slow: int):
        import threading

        self.port, self.idle, self.slow = port, idle, slow
        self.closed_by_server = 0  # connections the sampler closed (or reset)
        self.huge_sent = None  # bytes of the endless header sent before the sampler closed it
        self.huge_answer = b""
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._hold, daemon=True), threading.Thread(target=self._huge, daemon=True)]
        for t in self.threads:
            t.start()

    def _connect(self, first: bytes = b""):
        import socket

        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", self.port))
        except BlockingIOError:
            pass
        return [s, first]

    def _hold(self):
        import select

        slow_start = b"GET /health HTTP/1.1\r\n"
        held = [self._connect() for _ in range(self.idle)] + [self._connect(slow_start) for _ in range(self.slow)]
        while not self.done.is_set():
            poll = select.poll()
            for s, _ in held:
                poll.register(s, select.POLLIN)
            readable = {fd for fd, _ in poll.poll(0)}  # the end (or an answer, then the end): closed by the sampler
            for i, (s, pending) in enumerate(held):
                gone = s.fileno() in readable
                if not gone and i >= self.idle:  # a slow one: one more header line, never the last
                    try:
                        s.send(pending or b"X-Slow: 1\r\n")
                        held[i][1] = b""
                    except BlockingIOError:  # still connecting
                        pass
                    except OSError:
                        gone = True
                if gone:  # and come back at once
                    self.closed_by_server += 1
                    s.close()
                    held[i] = self._connect(slow_start if i >= self.idle else b"")
            self.done.wait(0.5)
        for s, _ in held:
            s.close()

    def _huge(self):
        import socket

        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as s:
            sent = 0
            try:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Huge: ")
                while sent < 256 << 20:
                    s.sendall(b"a" * (1 << 16))
                    sent += 1 << 16
                self.huge_answer = s.recv(4096)
            except OSError:
                try:
                    self.huge_answer = s.recv(4096)
                except OSError:
                    pass
            self.huge_sent = sent

    def stop(self):
        self.done.set()
        for t in self.threads:
            t.join(120)


def test_strangers_holding_every_connection_they_can_do_not_keep_the_owner_out(tmp_path, tiny_model, test_plugin,
                                                                               hand_started):
    """While strangers hold more connections than the sampler allows them (idle, and slowly sent
    headers) and send one endless header, the owner trains two steps through the same port
    (generate and weight sync, every request with the secret) and asks for greedy answers: all
    succeed. The sampler closes the strangers' connections (at its header deadline, or to make
    room for newer ones), stays below its open-file limit, and neither its front door nor vLLM
    grows in memory by more than a few MiB (vLLM never sees a stranger's byte)."""
    from rlvr.sampling.front import RESERVED_FDS, connection_caps

    sampler, urls = hand_started
    url = urls.split("[", 1)[1].rstrip("]")
    port = int(url.rsplit(":", 1)[1])
    front, vllm = sampler.pid, _vllm_server(sampler.pid)  # `rlvr sampler` became the front door
    waiting, admitted = connection_caps(FRONT_FILES)
    rss = {pid: _rss_kib(pid) for pid in (front, vllm)}
    strangers = Strangers(port, idle=3 * waiting, slow=waiting)
    most_files = 0
    try:
        assert wait_until(lambda: strangers.closed_by_server > waiting)  # the slots are full: room is being made
        recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="vllm")
        env[SECRET_ENV] = HAND_SECRET
        out = tmp_path / "run"
        proc = subprocess.Popen([RLVR, "train", recipe, "--output-dir", out, "--set", "sampling.mode=server",
                                 "--set", urls], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        answers = 0
        while proc.poll() is None:
            most_files = max(most_files, _open_files(front))
            _greedy(url, HAND_SECRET)
            answers += 1
        _, err = proc.communicate()
        assert proc.returncode == 0, err[-3000:]
        assert [r["step"] for r in rows(out)] == [1, 2] and answers > 0
        assert wait_until(lambda: strangers.huge_sent is not None)
    finally:
        strangers.stop()
    assert strangers.huge_sent < 16 << 20, strangers.huge_sent  # cut off after 16 KiB (and what the kernel's buffers took)
    assert strangers.huge_answer == b"" or strangers.huge_answer.startswith(b"HTTP/1.1 431")
    assert most_files <= RESERVED_FDS + waiting + 2 * admitted <= FRONT_FILES, most_files
    assert _rss_kib(front) - rss[front] < 32 << 10 and _rss_kib(vllm) - rss[vllm] < 64 << 10, (rss, _rss_kib(front),
                                                                                                  _rss_kib(vllm))
    assert sampler.poll() is None
