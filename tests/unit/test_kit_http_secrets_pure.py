"""A secret is the user's, for a host, and goes nowhere else (rlvr.kit.http.user_secret: the checks
that need no process, socket or model (the unit ring; the others:
tests/e2e/test_kit_http_secrets_runs.py, tests/integration/test_kit_http_secrets.py)."""

from __future__ import annotations

import re
import time

import pytest

from rlvr import RlvrError
from rlvr.host.registry import load_registry
from rlvr.kit.http import MAX_SECRET_BYTES, SECRETS_ENV, host_key, proxy_for, read_secret, secret_sources, user_secret
from rlvr.recipe.load import load_recipe
from rlvr.recipe.resolve import resolve
from helpers.kit_http_secrets import TRIAL

SECRET = "the-users-own-secret-0123456789abcdef"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                   "no_proxy")


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return path


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


def test_loopback_in_every_spelling_goes_direct(monkeypatch):
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    for host in ("127.1", "localhost.", "LOCALHOST", "127.0.0.1.", "0x7f.1", "[::1]", "api.localhost"):
        for scheme in ("http", "https"):
            assert proxy_for(f"{scheme}://{host}:8000/v1") is None, host
    assert proxy_for("http://10.1.2.3:8000/v1") == "proxy.invalid:3128"
