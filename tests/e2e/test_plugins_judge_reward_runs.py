"""The ``judge`` reward (plugins/judge_reward.py): the checks that run `rlvr` or other processes end
to end (the e2e ring; the others: tests/integration/test_plugins_judge_reward.py,
tests/unit/test_plugins_judge_reward_pure.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time


import pytest

from helpers import RLVR
from helpers.loopback import user_secret
from helpers.runs import make_run

from rlvr_plugins.judge_reward import judge_reward

KEY = "sk-judge-test-key-0123456789abcdef"


@pytest.mark.longer(600, reason="starts rlvr's sampler on vLLM and trains against it (54 s alone)")
def test_a_judge_on_a_real_rlvr_sampler(tmp_path, tiny_model, test_plugin):
    """`rlvr sampler` serving the tiny random-init model on loopback, behind its secret: the judge's
    requests are let in and answered (usage counted), and what a random model writes is parsed or
    None as unparseable, never an exception; without the secret the sampler refuses it (401)."""
    import requests

    from rlvr.models.distributed import free_port
    from rlvr.sampling.auth import SECRET_ENV, auth_headers

    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="vllm")
    # The sampler sizes its context for the recipe's prompts and answers (43 tokens); a judge's
    # request is the rubric and the completion between two random fences, whose hex digits take
    # a varying number of tokens: at 12 answer tokens the context was sometimes used up.
    text = recipe.read_text()
    assert "max_tokens: 12," in text
    recipe.write_text(text.replace("max_tokens: 12,", "max_tokens: 128,"))
    port, log = free_port(), tmp_path / "sampler.log"
    sampler = subprocess.Popen([RLVR, "sampler", recipe, "--port", str(port), "--log-file", log],
                               env={**env, SECRET_ENV: KEY}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    try:
        end = time.time() + 300
        while True:
            assert sampler.poll() is None and time.time() < end, (log.read_text() if log.exists() else "")[-2000:]
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", headers=auth_headers(KEY), timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            time.sleep(1)
        os.environ["JUDGE_SAMPLER_KEY"] = KEY
        base = {"base_url": f"http://127.0.0.1:{port}/v1", "api": "completions", "model": "policy",
                "rubric": "{{completion}} Score:", "max_tokens": 8, "timeout_s": 120, "retries": 0}
        with user_secret(base["base_url"], secret_env="JUDGE_SAMPLER_KEY"):
            out = judge_reward(["2+2?", "3+3?"], ["4", "6"], [None, None], **base)
        for s in out:
            assert s.info.get("usage", {}).get("completion_tokens", 0) >= 1, s.info  # authorised, answered, counted
            assert (s.value is not None and 0 <= s.value <= 1) or s.info["why"].startswith("unparseable"), s.info
        refused = judge_reward(["2+2?"], ["4"], [None], **base)  # no key
        assert refused[0].value is None and refused[0].info["why"].startswith("HTTP 401"), refused[0].info
        assert refused[0].info["why"].endswith(f"no secret was sent: the user gives one for this host with --secret "
                                               f"127.0.0.1:{port}=FILE (or RLVR_SECRETS)"), refused[0].info
    finally:
        os.environ.pop("JUDGE_SAMPLER_KEY", None)
        os.killpg(sampler.pid, signal.SIGTERM)
        sampler.wait(60)
