"""A secret is the user's, for a host, and goes nowhere else (rlvr.kit.http.user_secret; the ``http``
and ``judge`` rewards); what a service answers cannot make a reward raise or say the secret.

A trial recipe named ``~/.cache/huggingface/token`` and ``~/.git-credentials`` as its rewards'
secret files and ``GITHUB_TOKEN`` as a secret variable, with its own listener as the services:
``rlvr validate`` said ok and the listener got all three as bearer tokens.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from helpers import one_line_error, run_rlvr
from helpers.loopback import Service, serving
from rlvr import RlvrError
from rlvr.host.registry import load_registry
from rlvr.kit.http import (MAX_SECRET_BYTES, SECRETS_ENV, HttpFailure, host_key, post_json, proxy_for, read_secret,
                           secret_sources, user_secret)
from rlvr.recipe.load import load_recipe
from rlvr.recipe.resolve import resolve
from rlvr_plugins.http_reward import http_reward

SECRET = "the-users-own-secret-0123456789abcdef"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                   "no_proxy")


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def services():
    """Two scoring services on loopback, each recording what it got."""
    made = [Service(lambda h, body, n: h.reply(body={"scores": [1.0] * len(body["records"])})) for _ in range(2)]
    with serving(made[0]), serving(made[1]):
        yield made


def authorization(service) -> list[str | None]:
    return [headers.get("Authorization") for _, headers, _ in service.requests]


def score(url, n=1):
    return http_reward([f"p{i}" for i in range(n)], ["c"] * n, [None] * n, url=url, backoff_s=0.0, retries=0)


TRIAL = """\
name: trial
task: {{name: arithmetic, options: {{size: 20}}}}
prompt: {{template: "{{{{question}}}}"}}
rewards:
  {reward}: {{weight: 1.0, options: {options}}}
model: {{name: smollm2-135m-instruct}}
"""


@pytest.mark.parametrize("reward, options, message", [
    ("judge", "{base_url: 'http://127.0.0.1:9/v1', secret_file: '~/.cache/huggingface/token'}",
     "reward 'judge' option secret_file: a recipe does not choose where a secret is read from"),
    ("http", "{url: 'http://127.0.0.1:9/score', secret_file: '~/.git-credentials'}",
     "reward 'http' option secret_file: a recipe does not choose where a secret is read from"),
    ("'rlvr_plugins.http_reward:http_reward'", "{url: 'http://127.0.0.1:9/score', secret_env: GITHUB_TOKEN}",
     "module 'rlvr_plugins.http_reward' is part of rlvr's plugins"),
])
def test_the_trials_recipes_are_refused_before_anything_is_sent(reward, options, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(SECRETS_ENV, raising=False)
    path = tmp_path / "trial.yaml"
    path.write_text(TRIAL.format(reward=reward, options=options))
    registry = load_registry()
    registry.use_recipe(path)
    with pytest.raises(RlvrError, match=message.replace("(", r"\(")) as err:
        resolve(load_recipe(path), registry)
    assert "\n" not in str(err.value)


def test_the_trials_recipe_is_refused_by_validate_in_one_line(tmp_path):
    path = tmp_path / "trial.yaml"
    path.write_text(TRIAL.format(reward="judge", options="{base_url: 'http://127.0.0.1:9/v1', secret_env: HF_TOKEN}"))
    one_line_error(run_rlvr("validate", path, cwd=tmp_path),
                   "reward 'judge' option secret_env: a recipe does not choose where a secret is read from")


def test_a_secret_goes_only_to_the_host_and_port_it_was_given_for(services, secret_file, monkeypatch):
    a, b = services
    port_a, port_b = a.server_address[1], b.server_address[1]
    monkeypatch.setenv(SECRETS_ENV, f"127.0.0.1:{port_a}={secret_file}")
    for url in (f"{a.address}/score", f"{b.address}/score", f"http://localhost:{port_a}/score"):
        assert score(url)[0].value == 1.0
    assert authorization(a) == [f"Bearer {SECRET}", None]  # localhost is another host: no secret
    assert authorization(b) == [None]  # another port of the same host: none either
    # a host without a port: every port of that host, in any spelling of it
    monkeypatch.setenv(SECRETS_ENV, f"127.0.0.1={secret_file}")
    assert score(f"http://127.1:{port_b}/score")[0].value == 1.0
    assert authorization(b)[1:] == [f"Bearer {SECRET}"]
    assert user_secret("http://127.0.0.1.:1/x")[0] == user_secret("https://0x7f.1/x")[0] == SECRET
    # from a variable the user named, read at every call (a rotated secret is picked up)
    monkeypatch.setenv("MY_SCORER_KEY", SECRET + "2")
    monkeypatch.setenv(SECRETS_ENV, f"127.0.0.1:{port_b}=env:MY_SCORER_KEY")
    score(f"{b.address}/score")
    assert authorization(b)[-1] == f"Bearer {SECRET}2"
    # none given: none sent
    monkeypatch.delenv(SECRETS_ENV)
    score(f"{b.address}/score")
    assert authorization(b)[-1] is None


def test_the_users_entries_are_read_as_documented_and_bad_ones_are_one_line(monkeypatch, secret_file):
    assert secret_sources(f"127.0.0.1:8001={secret_file}, API.Example.com.=env:KEY,[::1]:80=f") == {
        "127.0.0.1:8001": str(secret_file), "api.example.com": "env:KEY", "::1:80": "f"}
    for bad, message in [("host", "give it as HOST=FILE"), ("=f", "give it as HOST=FILE"),
                         ("h:0=f", "the port is not a number from 1 to 65535"),
                         ("h:x=f", "the port is not a number"), ("https://h=f", "name a host (and port), not a URL"),
                         ("u@h=f", "name a host (and port), not a URL"), ("h=f,H.=g", "two secrets are given for h")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            secret_sources(bad)
    assert host_key("127.1") == host_key("0x7f.0.0.1") == host_key("127.0.0.1") == "127.0.0.1"
    assert host_key("LocalHost.") == "localhost" and host_key("[::1]") == "::1"
    monkeypatch.setenv(SECRETS_ENV, "127.0.0.1=/no/such/file")
    with pytest.raises(ValueError, match="the secret for 127.0.0.1: cannot read the secret file /no/such/file"):
        user_secret("http://127.0.0.1:1/x")
    assert user_secret("http://127.0.0.2:1/x") == ("", "")


def test_the_command_line_gives_secrets_and_refuses_bad_ones_in_one_line(tmp_path, secret_file):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(TRIAL.format(reward="http", options="{url: 'http://127.0.0.1:9/score'}"))
    out = run_rlvr("validate", recipe, "--secret", f"127.0.0.1:9={secret_file}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    one_line_error(run_rlvr("validate", recipe, "--secret", "127.0.0.1:9=missing.secret", cwd=tmp_path),
                   "option url: 'http://127.0.0.1:9/score': the secret for 127.0.0.1:9: cannot read the secret file "
                   "missing.secret")
    one_line_error(run_rlvr("validate", recipe, "--secret", "a=b,c=d", cwd=tmp_path),
                   "one HOST=FILE per --secret")


def test_a_secret_file_without_end_is_read_only_up_to_the_limit(tmp_path):
    start = time.monotonic()
    with pytest.raises(ValueError, match=f"has no line break in its first {MAX_SECRET_BYTES} bytes"):
        read_secret("/dev/zero")
    long = tmp_path / "long"
    long.write_text("x" * (MAX_SECRET_BYTES + 10))
    with pytest.raises(ValueError, match="has no line break"):
        read_secret(str(long))
    assert time.monotonic() - start < 5
    exact = tmp_path / "exact"
    exact.write_text("y" * MAX_SECRET_BYTES + "\nsecond line")
    assert read_secret(str(exact)) == "y" * MAX_SECRET_BYTES


def test_the_secret_never_comes_back_in_a_reason_phrase(secret_file):
    def answer(h, body, n):
        h.send_response(401, f"not {SECRET} go away")
        h.send_header("Content-Length", "2")
        h.end_headers()
        h.wfile.write(b"{}")

    with serving(Service(answer)) as service:
        with pytest.raises(HttpFailure) as err:
            post_json(service.address + "/x", {"a": 1}, secret=SECRET, retries=0)
    assert SECRET not in str(err.value) and "HTTP 401 not <secret> go away" in str(err.value)


@pytest.mark.parametrize("raw, why", [
    (b'{"scores": [' + b"9" * 5000 + b"]}", "the answer is not JSON"),
    (b'{"scores": ' + b"[" * 200 + b"]" * 200 + b"}", "nested deeper than 64 levels"),
])
def test_an_answer_python_cannot_hold_is_unscored_once_and_not_retried(raw, why):
    with serving(Service(lambda h, body, n: h.reply(raw=raw))) as service:
        out = http_reward(["p"], ["c"], [None], url=service.address + "/s", backoff_s=0.0, retries=2)
        assert out[0].value is None and why in out[0].info["why"], out[0].info
        assert len(service.requests) == 1


def test_loopback_in_every_spelling_goes_direct(monkeypatch):
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    for host in ("127.1", "localhost.", "LOCALHOST", "127.0.0.1.", "0x7f.1", "[::1]", "api.localhost"):
        for scheme in ("http", "https"):
            assert proxy_for(f"{scheme}://{host}:8000/v1") is None, host
    assert proxy_for("http://10.1.2.3:8000/v1") == "proxy.invalid:3128"


def test_a_401_without_a_secret_says_how_to_give_one():
    with serving(Service(lambda h, body, n: h.reply(401, body={"error": "no"}))) as service:
        out = score(service.address + "/s")
    port = service.server_address[1]
    assert out[0].info["why"].startswith("HTTP 401")
    assert out[0].info["why"].endswith(f"no secret was sent: the user gives one for this host with --secret "
                                       f"127.0.0.1:{port}=FILE (or {SECRETS_ENV})")
    json.dumps(out[0].info)


def test_a_judges_usage_never_carries_the_secret(secret_file, monkeypatch):
    """A judge that names its usage's keys after the secret: they are not kept (token counts
    are plain names), and nothing of the answer holds the secret."""
    from rlvr_plugins.judge_reward import judge_reward

    answer = {"choices": [{"message": {"content": f"{SECRET} Score: 7/10"}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 5, f"k{SECRET}": 1, "completion_tokens": 2, "bad key\x1b": 3}}
    with serving(Service(lambda h, body, n: h.reply(body=answer))) as service:
        monkeypatch.setenv(SECRETS_ENV, f"127.0.0.1:{service.server_address[1]}={secret_file}")
        out = judge_reward(["q"], ["c"], [None], base_url=service.address + "/v1", backoff_s=0.0)
    assert out[0].value == pytest.approx(0.7)
    assert out[0].info["usage"] == {"prompt_tokens": 5, "completion_tokens": 2}
    assert SECRET not in repr((out[0].info, out[0].metrics))
