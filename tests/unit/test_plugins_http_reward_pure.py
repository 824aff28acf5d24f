"""The ``http`` reward (plugins/http_reward.py, rlvr/kit/http.py) against loopback servers that
behave and that do not, and the reference server of examples/reward-server end to end: the checks
that need no process, socket or model (the unit ring; the others:
tests/integration/test_plugins_http_reward.py)."""

from __future__ import annotations

import logging
import re

import pytest

from helpers import ROOT
from helpers.docs import check_recipe, recipe_blocks

from rlvr import RlvrError
from rlvr.host.registry import load_registry
from rlvr.rewards.runner import BoundReward
from helpers.plugins_http_reward import score

SECRET = "s3cret-token-for-the-http-reward-tests"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                   "no_proxy")


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return str(path)


@pytest.fixture
def proxies(monkeypatch):
    """The proxy variables cleared; ``proxies(HTTPS_PROXY=...)`` sets some."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return lambda **names: [monkeypatch.setenv(k, v) for k, v in names.items()]


def test_which_proxy_a_url_goes_through(proxies):
    from rlvr.kit.http import proxy_for

    assert proxy_for("https://scorer.invalid/score") is None  # no variable: direct
    proxies(HTTPS_PROXY="proxy.corp:3128", ALL_PROXY="http://all.corp:1080")
    assert proxy_for("https://scorer.invalid/score") == "proxy.corp:3128"  # a bare host:port is http://
    assert proxy_for("http://scorer.invalid/score") == "all.corp:1080"  # no HTTP_PROXY: ALL_PROXY
    for loopback in ("localhost", "127.0.0.1", "127.3.4.5", "[::1]"):  # always direct, whatever NO_PROXY says
        assert proxy_for(f"https://{loopback}:8000/v1") is None
    proxies(NO_PROXY="other.invalid, .corp.invalid")
    assert proxy_for("https://other.invalid/x") is None and proxy_for("https://a.corp.invalid/x") is None
    assert proxy_for("https://scorer.invalid/x") == "proxy.corp:3128"


@pytest.mark.parametrize("value", ["socks5://ann:hunter2@127.0.0.1:1080", "https://ann:hunter2@proxy.corp:3128",
                                   "http://ann:hunter2@:3128"])
def test_a_proxy_rlvr_cannot_use_is_refused_in_one_line_before_anything_is_sent(value, proxies, registry):
    proxies(HTTPS_PROXY=value)
    with pytest.raises(RlvrError) as err:
        BoundReward(registry.reward("http"), 1.0, {"url": "https://scorer.invalid/score"})
    message = str(err.value)
    assert "HTTPS_PROXY names a proxy rlvr cannot use" in message and "only an http://host:port proxy" in message
    assert "hunter2" not in message and "\n" not in message
    with pytest.raises(RlvrError, match="HTTPS_PROXY names a proxy rlvr cannot use"):
        BoundReward(registry.reward("judge"), 1.0, {"base_url": "https://judge.invalid/v1"})
    out = score("https://scorer.invalid/score", ["a"])  # set after the options were checked: each record says so
    assert out[0].value is None and "HTTPS_PROXY names a proxy rlvr cannot use" in out[0].info["why"]
    assert "hunter2" not in out[0].info["why"]


def test_a_secret_sent_in_clear_text_beyond_this_host_is_warned_about_once(secret_file, caplog, monkeypatch):
    import rlvr.kit.http

    def nowhere(target, *args):  # tests reach no address but loopback: the attempt fails here
        raise rlvr.kit.http.HttpFailure(f"not sent to {target.host}")

    monkeypatch.setattr(rlvr.kit.http, "_attempt", nowhere)
    url = "http://192.0.2.1:9/score"  # TEST-NET-1
    for _ in range(2):
        out = score(url, ["a"], secret_file=secret_file, timeout_s=0.2, retries=0)
        assert out[0].value is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["http reward: its secret goes to http://192.0.2.1:9/score in clear text (http:// to another "
                        "host); use https://"]
    score("http://127.0.0.1:9/score", ["a"], secret_file=secret_file, retries=0)  # loopback: no warning
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.mark.parametrize("options, message", [
    ({"url": "ftp://example.org/"}, "option url: 'ftp://example.org/': a URL starts with http:// or https://"),
    ({"url": "https://user:pw@example.org/"}, "credentials in the URL would be logged with it"),
    ({"url": "http://:80/"}, "the URL names no host"),
    ({"url": "http://exämple.org/"}, "the URL holds non-ASCII characters"),
    ({"secret_file": "~/.git-credentials"}, "option secret_file: a recipe does not choose where a secret is read "
                                            "from (it is data people hand each other); the user gives it for the "
                                            "service's host: --secret HOST=FILE, or RLVR_SECRETS"),
    ({"secret_env": "GITHUB_TOKEN"}, "option secret_env: a recipe does not choose where a secret is read from"),
    ({"timeout_s": 0}, "option timeout_s: 0 is not a number > 0 and <= 3600"),
    ({"retries": 11}, "option retries: 11 is not an integer >= 0 and <= 10"),
    ({"batch_size": 0}, "option batch_size: 0 is not an integer >= 1"),
    ({"max_response_bytes": 10}, "option max_response_bytes: 10 is not an integer >= 1024"),
    ({"send_columns": ["completion"]}, "'completion' is always sent"),
    ({"token": "x"}, "reward 'http' has no option 'token'"),
])
def test_bad_options_are_one_line_errors_before_anything_is_scored(registry, options, message):
    with pytest.raises(RlvrError) as err:
        BoundReward(registry.reward("http"), 1.0, options)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_options_a_recipe_gives_are_taken(registry, secret_file):
    bound = BoundReward(registry.reward("http"), 1.0, {"send_columns": "answer", "timeout_s": 5,
                                                      "url": "https://scores.example.org/v2?x=1"})
    assert bound.options["send_columns"] == ("answer",) and bound.options["timeout_s"] == 5.0


def test_the_recipes_in_the_docs_validate(registry, tmp_path, monkeypatch):
    """docs/rewards.md's recipe snippets for http and judge, checked as `rlvr validate` checks them
    (their secret file and variable made here)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reward-server.secret").write_text(SECRET + "\n")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    recipes = [r for r in recipe_blocks(ROOT / "docs" / "rewards.md") if re.search(r"^\s+(http|judge):", r, re.M)]
    assert len(recipes) >= 2
    for i, text in enumerate(recipes):
        check_recipe(text, registry, tmp_path, f"snippet{i}")
