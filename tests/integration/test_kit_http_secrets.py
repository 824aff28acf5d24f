"""A secret is the user's, for a host, and goes nowhere else (rlvr.kit.http.user_secret; the ``http``
and ``judge`` rewards); what a service answers cannot make a reward raise or say the secret.

A trial recipe named ``~/.cache/huggingface/token`` and ``~/.git-credentials`` as its rewards'
secret files and ``GITHUB_TOKEN`` as a secret variable, with its own listener as the services:
``rlvr validate`` said ok and the listener got all three as bearer tokens.
"""

from __future__ import annotations

import json

import pytest

from helpers.loopback import Service, serving
from rlvr.kit.http import SECRETS_ENV, HttpFailure, post_json, user_secret
from rlvr_plugins.http_reward import http_reward
from helpers.kit_http_secrets import score

SECRET = "the-users-own-secret-0123456789abcdef"


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
