"""Server mode's settings and process set-up, without starting vLLM: the checks that run `rlvr` or
other processes end to end (the e2e ring; the others:
tests/integration/test_sampling_server_options_live.py, tests/unit/test_sampling_server_options.py)."""

from __future__ import annotations

import os
import sys

import pytest

from rlvr import RlvrError

FAKE_SERVER = """
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        choice = {"index": 0, "text": "x", "token_ids": [7], "finish_reason": "stop",
                  "logprobs": {"token_logprobs": [-0.5]}}
        out = json.dumps({"choices": [dict(choice, index=i) for i in range(body["n"])]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(out))); self.end_headers()
        self.wfile.write(out)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.mark.parametrize("fault", ["dies", "hangs"])
def test_a_sampler_that_dies_or_hangs_is_named_in_one_line(tmp_path, fault):
    import signal
    import time

    from rlvr.sampling.server import SamplerProcess, ServerSampler
    from rlvr.models.distributed import free_port

    port = free_port()
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    secret = "s" * 32
    proc = SamplerProcess([sys.executable, str(script), str(port)], {**os.environ, "RLVR_SAMPLER_SECRET": secret},
                          tmp_path / "sampler-0.log", port)
    try:
        proc.wait_ready(30)
        sampler = ServerSampler([proc.url], secret=secret, rank=1, world=1, timeout_s=2, bucket_bytes=1 << 20,
                                processes=[proc])
        groups = sampler.generate([[1, 2], [3]], n=2, temperature=1.0, top_p=1.0, max_tokens=4, seed=0, logprobs=True)
        assert [[c.token_ids for c in g] for g in groups] == [[[7], [7]], [[7], [7]]] and groups[0][0].logprobs == [-0.5]
        # not reaped yet when the request fails (reset or refused): the one line names the exit all the same
        os.kill(proc.proc.pid, signal.SIGKILL if fault == "dies" else signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(RlvrError) as err:
            sampler.generate([[1, 2]], n=2, temperature=1.0, top_p=1.0, max_tokens=4, seed=0)
        message = str(err.value)
        assert "\n" not in message
        if fault == "dies":
            assert f"sampler process {proc.proc.pid}" in message and "exited with status -9" in message
            assert str(tmp_path / "sampler-0.log") in message
        else:
            assert "did not answer within 2 s (sampling.server.timeout_s)" in message
            assert time.monotonic() - start < 10
    finally:
        proc.stop(grace_s=2)
    assert proc.proc.poll() is not None
