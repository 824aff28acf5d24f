"""The ``http`` reward (plugins/http_reward.py, rlvr/kit/http.py) against loopback servers that
behave and that do not, and the reference server of examples/reward-server end to end."""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from helpers import ROOT, wait_until
from helpers.loopback import Proxy, Service, serving
from helpers.runs import listening_sockets

from rlvr.host.registry import load_registry
from rlvr.rewards.runner import BoundReward, score_batch
from helpers.plugins_http_reward import score

SECRET = "s3cret-token-for-the-http-reward-tests"
SERVER_SCRIPT = ROOT / "examples" / "reward-server" / "server.py"
SELF_SIGNED = ROOT / "tests" / "data" / "loopback-self-signed.pem"  # key and certificate for 127.0.0.1, 100 years
# ... and for scorer.invalid, a name no resolver knows: reached only through the test's proxy
SCORER_INVALID = ROOT / "tests" / "data" / "scorer-invalid-self-signed.pem"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                   "no_proxy")


def scores_of_ones(h, body, n):
    h.reply(body={"scores": [1.0] * len(body["records"])})


@pytest.fixture
def fake():
    """A scoring service on loopback (``fake.behave`` answers; the default scores 1.0 each)."""
    service = Service(lambda h, body, n: service.behave(h, body, n))
    service.behave = scores_of_ones
    service.url = service.address + "/score"
    with serving(service):
        yield service


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return str(path)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def whys(scores):
    return [s.info.get("why") for s in scores]


# ------------------------------------------------------------------------------- the wire format


def test_records_go_out_and_scores_come_back_in_the_documented_format(fake, secret_file):
    fake.behave = lambda h, body, n: h.reply(body={"scores": [
        0.5, None, {"score": 1, "why": "exact", "info": {"pred": "4"}}, {"score": None, "why": "no answer given"}, 2]})
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "c4 in a chat"}]
    out = score(fake.url, ["c0", "c1", "c2", "c3", chat], secret_file=secret_file, send_columns=("answer",),
                answer=["a0", None, "a2", "a3", "a4"], hidden=["h"] * 5)
    assert [s.value for s in out] == [0.5, None, 1.0, None, 2.0]
    assert out[2].info["pred"] == "4" and out[2].info["why"] == "exact"
    assert out[1].info["why"] == "the server returned null without a reason"
    assert out[3].info["why"] == "no answer given"
    assert out[0].info["http"]["status"] == 200 and out[0].info["http"]["attempts"] == 1
    (_, headers, body), = fake.requests
    assert headers["Authorization"] == f"Bearer {SECRET}" and headers["Content-Type"] == "application/json"
    assert body == {"records": [
        {"prompt": "p0", "completion": "c0", "answer": "a0"}, {"prompt": "p1", "completion": "c1", "answer": None},
        {"prompt": "p2", "completion": "c2", "answer": "a2"}, {"prompt": "p3", "completion": "c3", "answer": "a3"},
        {"prompt": "p4", "completion": "c4 in a chat", "answer": "a4"}]}  # 'hidden' is not named: not sent


def test_a_column_no_record_has_leaves_the_batch_unscored_with_the_reason(fake):
    out = score(fake.url, ["a", "b"], send_columns=("answr",), answer=["1", "2"])
    assert [s.value for s in out] == [None, None] and "'answr'" in out[0].info["why"] and not fake.requests


def test_a_record_json_cannot_hold_is_unscored_and_the_others_are_sent(fake):
    import numpy as np

    out = score(fake.url, ["a", "b", "c"], send_columns=("tests",), tests=[np.array([1, 2]), {1, 2}, np.int64(3)])
    assert [s.value for s in out] == [1.0, None, 1.0]
    assert out[1].info["why"] == "the record cannot be sent as JSON: TypeError: a set is not JSON"
    (_, _, body), = fake.requests
    assert [r["tests"] for r in body["records"]] == [[1, 2], 3]


def test_big_batches_are_split_and_no_more_requests_run_at_once_than_allowed(fake):
    def behave(h, body, n):
        time.sleep(0.2)
        h.reply(body={"scores": [int(r["completion"]) for r in body["records"]]})

    fake.behave = behave
    out = score(fake.url, [str(i) for i in range(10)], batch_size=3, max_concurrent=2)
    assert [s.value for s in out] == list(range(10))
    assert sorted(len(body["records"]) for _, _, body in fake.requests) == [1, 3, 3, 3]
    assert fake.peak == 2


# ------------------------------------------------------------------------------ hostile services


def huge(h, body, n):
    h.reply(raw=b"[" + b"1," * 50_000 + b"1]")


def huge_without_length(h, body, n):
    h.reply(raw=b" " * 100_000 + b"{}", length=False)


def redirect(h, body, n):
    h.reply(302, {}, headers={"Location": "http://elsewhere.invalid:9/steal"})


@pytest.mark.parametrize("behave, why", [
    (lambda h, body, n: h.reply(raw=b"{not json"), "HTTP 200, but the answer is not JSON"),
    (lambda h, body, n: h.reply(body={"scores": [1.0]}), "the answer has 1 scores for 2 records"),
    (lambda h, body, n: h.reply(body={"score": [1.0, 1.0]}), "the answer is an object without a 'scores' list"),
    (lambda h, body, n: h.reply(body=[1.0, 1.0]), "the answer is a JSON array"),
    (huge, "HTTP 200: an answer of 100003 bytes, over max_response_bytes (8192)"),
    (huge_without_length, "HTTP 200: an answer over max_response_bytes (8192 bytes)"),
    (lambda h, body, n: h.reply(404, {"error": "no such route"}), 'HTTP 404 Not Found: {"error": "no such route"}'),
    (redirect, "HTTP 302: redirected to http://elsewhere.invalid:9/steal; redirects are not followed"),
], ids=["malformed", "wrong-count", "no-scores", "not-an-object", "huge", "huge-unannounced", "404", "redirect"])
def test_an_unusable_answer_leaves_its_records_unscored_with_the_reason_and_is_not_retried(fake, behave, why):
    fake.behave = behave
    out = score(fake.url, ["a", "b"], max_response_bytes=8192, retries=3)
    assert [s.value for s in out] == [None, None]
    assert out[0].info["why"].startswith(why), out[0].info["why"]
    assert len(fake.requests) == 1  # none of these is retried (a redirect is not followed either)


def test_a_score_that_is_no_number_spoils_only_its_record(fake):
    fake.behave = lambda h, body, n: h.reply(raw=b'{"scores": [1, "0.5", true, {"score": "x"}, {"why": "w"}, 1e999,'
                                                 b' [1], 0.25]}')
    out = score(fake.url, list("abcdefgh"))
    assert [s.value for s in out] == [1.0, None, None, None, None, None, None, 0.25]
    assert whys(out)[1:7] == ["score 1 is a JSON string (\"0.5\"), not a number",
                              "score 2 is a JSON boolean (true), not a number",
                              "score 3 is a JSON string (\"x\"), not a number",
                              "score 4 is an object without 'score'",
                              "score 5 is Infinity, not a finite number",
                              "score 6 is a JSON array ([1]), not a number"]


def test_a_slow_server_is_cut_at_the_timeout_on_every_attempt(fake):
    fake.behave = lambda h, body, n: time.sleep(3)
    start = time.monotonic()
    out = score(fake.url, ["a", "b"], timeout_s=0.4, retries=1)
    took = time.monotonic() - start
    assert [s.value for s in out] == [None, None]
    assert out[0].info["why"] == "no answer within 0.4 s (after 2 attempts)"
    assert len(fake.requests) == 2 and 0.8 <= took < 2.0, took


@pytest.mark.parametrize("part", ["headers", "body"])
def test_a_server_that_trickles_its_answer_is_cut_at_the_timeout_too(fake, part):
    """Each byte in time for a per-read timeout, the whole far too late: the deadline is the attempt's."""
    def trickle(h, body, n):
        h.wfile.write(b"HTTP/1.0 200 OK\r\n" + (b"" if part == "headers" else b"Content-Length: 999\r\n\r\n"))
        for _ in range(40):
            h.wfile.write(b"x")
            h.wfile.flush()
            time.sleep(0.05)

    fake.behave = trickle
    start = time.monotonic()
    out = score(fake.url, ["a"], timeout_s=0.5, retries=0)
    assert out[0].value is None and out[0].info["why"] == "no answer within 0.5 s"
    assert time.monotonic() - start < 1.5


def test_a_5xx_is_retried_with_backoff_and_a_success_after_it_counts(fake):
    fake.behave = lambda h, body, n: (h.reply(500, {"error": "busy"}) if n == 1 else
                                      h.reply(body={"scores": [0.75] * len(body["records"])}))
    out = score(fake.url, ["a", "b"], retries=2, backoff_s=0.05)
    assert [s.value for s in out] == [0.75, 0.75] and out[0].info["http"]["attempts"] == 2
    assert len(fake.requests) == 2


def test_a_server_that_keeps_failing_is_tried_retries_plus_one_times(fake):
    fake.behave = lambda h, body, n: h.reply(503, {"error": "down for maintenance"})
    out = score(fake.url, ["a"], retries=2, backoff_s=0.01)
    assert out[0].value is None and len(fake.requests) == 3
    assert out[0].info["why"] == 'HTTP 503 Service Unavailable: {"error": "down for maintenance"} (after 3 attempts)'
    assert out[0].info["http"]["attempts"] == 3


def test_each_request_s_cost_goes_into_the_step_s_metrics_on_its_first_record(fake, registry):
    """requests, retries, failures and seconds (sum, mean, max), once per request: on the first
    record it carried, so that a step's sums count requests, not records."""
    fake.behave = lambda h, body, n: (h.reply(500, {"error": "busy"}) if n == 1 else
                                      h.reply(body={"scores": [0.5] * len(body["records"])}))
    out = score(fake.url, ["a", "b", "c"], batch_size=2, max_concurrent=1, retries=1)  # the first: 500, then 200
    assert [s.value for s in out] == [0.5] * 3 and [s.metrics == {} for s in out] == [False, True, False]
    first, last = out[0].metrics, out[2].metrics
    assert first == {"requests": 1, "retries": 1, "failed_requests": 0, "seconds": first["seconds"],
                     "seconds_mean": first["seconds"], "seconds_max": first["seconds"]}
    assert first["seconds"] == pytest.approx(out[0].info["http"]["seconds"], abs=1e-3)
    assert last["requests"] == 1 and last["retries"] == 0 and last["failed_requests"] == 0
    fake.behave = lambda h, body, n: h.reply(503, {"error": "down"})
    failed = score(fake.url, ["a", "b"], retries=1)
    assert [s.value for s in failed] == [None, None] and failed[1].metrics == {}
    assert failed[0].metrics["failed_requests"] == 1 and failed[0].metrics["retries"] == 1
    assert failed[0].metrics["seconds"] > 0

    fake.behave = scores_of_ones  # through rlvr's runner: the sums the step's row is made of
    bound = BoundReward(registry.reward("http"), 1.0, {"url": fake.url, "batch_size": 2, "backoff_s": 0.0})
    batch = score_batch([bound], ["p"] * 5, list("abcde"), [None] * 5, [{}] * 5)
    sums = {k.split("/", 2)[2]: v for k, v in batch.metrics.items()}
    assert {k: sums[k] for k in ("requests", "retries", "failed_requests", "seconds_mean/n")} == {
        "requests": 3, "retries": 0, "failed_requests": 0, "seconds_mean/n": 3}
    assert 0 < sums["seconds_max"] <= sums["seconds"] == pytest.approx(sums["seconds_mean"])


def test_a_refused_connection_is_unscored_quickly():
    port = closed_port()
    start = time.monotonic()
    out = score(f"http://127.0.0.1:{port}/score", ["a", "b"], retries=2, backoff_s=0.01)
    assert [s.value for s in out] == [None, None]
    assert out[0].info["why"] == f"connection refused by 127.0.0.1:{port} (after 3 attempts)"
    assert time.monotonic() - start < 2


def test_the_secret_never_reaches_the_infos_or_the_log(fake, secret_file, caplog, monkeypatch):
    """A server that echoes the Authorization header back, in an error and in its scores."""
    def echo(h, body, n):
        said = h.headers["Authorization"]
        if n == 1:
            h.reply(500, {"error": f"bad token {said}"})
        else:
            h.reply(body={"scores": [{"score": None, "why": f"you sent {said}", "info": {said: said}}]})

    fake.behave = echo
    caplog.set_level(logging.DEBUG)
    out = score(fake.url, ["a"], secret_file=secret_file, retries=0)
    assert out[0].value is None and "bad token Bearer <secret>" in out[0].info["why"]
    out += score(fake.url, ["a"], secret_file=secret_file, retries=0)
    assert out[1].info["why"] == "you sent Bearer <secret>" and out[1].info["Bearer <secret>"] == "Bearer <secret>"
    monkeypatch.setenv("HTTP_REWARD_TEST_KEY", SECRET)
    out += score(fake.url, ["a"], secret_env="HTTP_REWARD_TEST_KEY", retries=0)
    assert fake.requests[2][1]["Authorization"] == f"Bearer {SECRET}"  # the variable's secret was sent
    assert SECRET not in repr([(s.value, s.info) for s in out]) and SECRET not in caplog.text
    assert all(SECRET not in str(value) for _, _, body in fake.requests for value in body["records"])


@contextmanager
def tls_service(key_and_certificate):
    """A scoring service on loopback behind TLS (scores of 1.0), with this key and certificate."""
    import ssl

    service = Service(scores_of_ones)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(key_and_certificate)
    service.socket = context.wrap_socket(service.socket, server_side=True)
    with serving(service):
        yield service


@pytest.fixture
def https_fake():
    """A scoring service on loopback behind TLS, with a self-signed certificate for 127.0.0.1."""
    with tls_service(SELF_SIGNED) as service:
        service.url = f"https://127.0.0.1:{service.server_address[1]}/score"
        yield service


def test_https_checks_the_certificate_and_a_failed_check_is_not_retried(https_fake, secret_file, monkeypatch):
    out = score(https_fake.url, ["a"], secret_file=secret_file, retries=2)
    assert out[0].value is None and not https_fake.requests
    assert out[0].info["why"] == "127.0.0.1: self-signed certificate"  # once: not retried
    monkeypatch.setenv("SSL_CERT_FILE", str(SELF_SIGNED))  # a private authority the user trusts
    out = score(https_fake.url, ["a"], secret_file=secret_file)
    assert out[0].value == 1.0 and https_fake.requests[0][1]["Authorization"] == f"Bearer {SECRET}"


# ------------------------------------------------------------------------------- proxies

@pytest.fixture
def proxies(monkeypatch):
    """The proxy variables cleared; ``proxies(HTTPS_PROXY=...)`` sets some."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return lambda **names: [monkeypatch.setenv(k, v) for k, v in names.items()]


def basic(user: str, password: str) -> str:
    import base64

    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def tls_scorer():
    """A scoring service on loopback behind TLS, its certificate for scorer.invalid."""
    with tls_service(SCORER_INVALID) as service:
        yield service


def test_https_goes_through_the_environments_proxy_in_a_tunnel_the_secret_inside_tls(
        tls_scorer, proxies, secret_file, monkeypatch):
    port = tls_scorer.server_address[1]
    with serving(Proxy(("127.0.0.1", port), credentials=basic("ann", "pa ss"))) as proxy:
        proxies(HTTPS_PROXY=f"http://ann:pa%20ss@127.0.0.1:{proxy.server_address[1]}",
                HTTP_PROXY="http://127.0.0.1:9")  # the other scheme's: not used for https
        monkeypatch.setenv("SSL_CERT_FILE", str(SCORER_INVALID))
        out = score(f"https://scorer.invalid:{port}/score", ["a", "b"], secret_file=secret_file)
        assert [s.value for s in out] == [1.0, 1.0], whys(out)
        ((method, target, headers),) = proxy.seen
        assert (method, target) == ("CONNECT", f"scorer.invalid:{port}")
        assert headers["proxy-authorization"] == basic("ann", "pa ss")
        assert not any(SECRET in value for value in headers.values())  # the bearer secret went inside TLS only
        path, sent, _ = tls_scorer.requests[0]
        assert path == "/score" and sent["Authorization"] == f"Bearer {SECRET}" and "Proxy-Authorization" not in sent

        # the certificate is checked against the host named, through the tunnel too
        out = score(f"https://other.invalid:{port}/score", ["a"], secret_file=secret_file, retries=2)
        assert out[0].value is None and out[0].info["why"].startswith("other.invalid: Hostname mismatch"), whys(out)
        assert len(proxy.seen) == 2  # not retried

        # a proxy that refuses our credentials: its answer, once, and no password in it
        proxies(HTTPS_PROXY=f"http://ann:wrong-password@127.0.0.1:{proxy.server_address[1]}")
        out = score(f"https://scorer.invalid:{port}/score", ["a"], secret_file=secret_file, retries=2)
        why = out[0].info["why"]
        assert out[0].value is None and "407 Proxy Authentication Required" in why and "wrong-password" not in why
        assert f"proxy 127.0.0.1:{proxy.server_address[1]}, to scorer.invalid:{port}" in why
        assert len(proxy.seen) == 3
    assert len(tls_scorer.requests) == 1


def test_plain_http_is_sent_to_the_proxy_with_the_whole_url(fake, proxies):
    with serving(Proxy(("127.0.0.1", fake.server_address[1]))) as proxy:
        proxies(HTTP_PROXY=proxy.address)
        out = score("http://scorer.invalid:8080/score?v=2", ["a"])
        assert out[0].value == 1.0, whys(out)
        assert [(m, t) for m, t, _ in proxy.seen] == [("POST", "http://scorer.invalid:8080/score?v=2")]
        assert fake.requests[0][0] == "/score?v=2"
        proxies(HTTP_PROXY=f"http://127.0.0.1:{closed_port()}")
        out = score("http://scorer.invalid:8080/score", ["a"], retries=0)
        assert out[0].info["why"].startswith("connection refused by proxy 127.0.0.1:"), whys(out)


def test_an_unreadable_secret_at_call_time_leaves_the_batch_unscored(fake, tmp_path):
    out = score(fake.url, ["a"], secret_file=str(tmp_path / "gone"))
    assert out[0].value is None
    assert out[0].info["why"].startswith(f"no secret: the secret for 127.0.0.1:{fake.url.split(':')[2].split('/')[0]}: "
                                         "cannot read the secret file")
    assert not fake.requests


# --------------------------------------------------------------------------------------- options


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def test_the_runner_reports_why_a_down_server_scored_nothing(registry):
    """rlvr's reward runner, as training calls it: every sample unscorable, and the step's line
    says which reward and why (trainer.max_unscored_steps takes it from there)."""
    port = closed_port()
    bound = BoundReward(registry.reward("http"), 1.0, {"url": f"http://127.0.0.1:{port}/score", "retries": 0})
    batch = score_batch([bound], ["p"] * 3, ["c"] * 3, [None] * 3, [{}] * 3)
    assert batch.total == [None, None, None] and batch.unscorable() == 3
    assert batch.unscored().line() == (f"reward 'http' could not score 3 of 3 samples (returned None: connection "
                                       f"refused by 127.0.0.1:{port})")


def start_server(*args, env=None, log=subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(SERVER_SCRIPT), "--port", "0", *args], stdout=subprocess.DEVNULL,
                            stderr=log, text=True, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """examples/reward-server serving the built-in ``format`` reward, with its secret in a file;
    ``reference.log`` is where its output goes."""
    folder = tmp_path_factory.mktemp("reward-server")
    secret, log = folder / "secret", folder / "server.log"
    secret.write_text(SECRET + "\n")
    with open(log, "w") as out:
        proc = start_server("--reward", "format", "--option", "boxed=one", "--secret-file", str(secret),
                            "--max-request-bytes", "4096", log=out)
    assert wait_until(lambda: "\n" in log.read_text() or proc.poll() is not None), log.read_text()
    line = log.read_text().splitlines()[0]
    m = re.fullmatch(r"reward-server: 'format' on http://127\.0\.0\.1:(\d+)/score", line)
    assert m and proc.poll() is None, log.read_text()
    proc.port, proc.log = int(m.group(1)), log
    yield proc
    proc.terminate()
    proc.wait(30)


def raw(port, method, path, body=b"", headers=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request(method, path, body=body, headers=headers or {})
    response = connection.getresponse()
    out = response.status, json.loads(response.read() or b"null")
    connection.close()
    return out


def test_the_reference_server_scores_with_a_builtin_reward_as_rlvr_does(reference, secret_file):
    from rlvr_plugins.format_reward import format_reward

    completions = ["so \\boxed{4}", "no box", "\\boxed{1} and \\boxed{2}", "\\boxed{7}. Done, more text"]
    url = f"http://127.0.0.1:{reference.port}/score"
    out = score(url, completions, secret_file=secret_file)
    direct = format_reward([""] * 4, completions, [None] * 4, boxed="one")
    assert [s.value for s in out] == [d.value for d in direct] and len({d.value for d in direct}) >= 2
    assert [s.info["checks"] for s in out] == [d.info["checks"] for d in direct]
    assert all(s.info["http"]["status"] == 200 for s in out)


def test_the_reference_server_refuses_whoever_lacks_the_secret(reference, secret_file, tmp_path):
    url = f"http://127.0.0.1:{reference.port}/score"
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-secret-of-this-server\n")
    for options in ({}, {"secret_file": str(wrong)}):
        out = score(url, ["\\boxed{1}"], retries=0, **options)
        assert out[0].value is None
        assert out[0].info["why"].startswith('HTTP 401 Unauthorized: {"error": "unauthorized'), out[0].info
    for headers in ({}, {"Authorization": SECRET}, {"Authorization": f"Basic {SECRET}"},
                    {"Authorization": f"Bearer {SECRET}x"}):
        assert raw(reference.port, "GET", "/health", headers=headers)[0] == 401
        assert raw(reference.port, "POST", "/score", b'{"records": []}', headers)[0] == 401
    good = {"Authorization": f"Bearer {SECRET}"}
    assert raw(reference.port, "GET", "/health", headers=good) == (200, {"reward": "format"})
    assert raw(reference.port, "POST", "/score", b'{"records": []}', good) == (200, {"scores": []})
    assert raw(reference.port, "POST", "/score", b"x" * 5000, good)[0] == 413  # --max-request-bytes 4096
    assert raw(reference.port, "POST", "/score", b"{nope", good)[0] == 400
    status, body = raw(reference.port, "POST", "/score", b'{"records": [{"prompt": "p"}]}', good)
    assert status == 400 and body["error"] == "record 1 has no 'completion' (text, or chat messages)"
    assert raw(reference.port, "POST", "/other", b"{}", good)[0] == 404
    assert listening_sockets(reference.pid) == {("127.0.0.1", reference.port)}  # loopback only
    log = reference.log.read_text()  # one line a request, never a header
    assert "reward-server: 127.0.0.1 401 GET /health: 0 records" in log
    assert "reward-server: 127.0.0.1 200 POST /score: 0 records" in log
    assert SECRET not in log and "Bearer" not in log and "Authorization" not in log


def test_the_reference_server_needs_a_secret_and_a_known_reward(tmp_path):
    env = {"RLVR_REWARD_SERVER_SECRET": ""}
    done = start_server("--reward", "format", env=env)
    assert done.wait(60) == 2 and done.stderr.read().startswith("reward-server: error: no secret:")
    short = tmp_path / "short"
    short.write_text("short\n")
    done = start_server("--reward", "format", "--secret-file", str(short))
    assert done.wait(60) == 2 and "use at least 16" in done.stderr.read()
    done = start_server("--reward", "format", "--option", "boxed=two", env={"RLVR_REWARD_SERVER_SECRET": SECRET})
    err = done.stderr.read()
    assert done.wait(60) == 2 and err.count("\n") == 1 and "option boxed: 'two' is not one of one, any, none" in err
