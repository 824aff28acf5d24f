"""Weight sync, trainer -> vLLM, against model size: collective broadcast and shared memory vs safetensors files.

How each way moves the trainer's full weights into a vLLM engine on this machine (CPU, fp32):

- ``files (anchor)``: the way rlvr reached an engine in another process before, and the way
  many RL stacks still do: write a safetensors folder to ``/dev/shm``, have vLLM's workers
  ``reload_weights`` from it (a full copy through the filesystem every step);
- ``broadcast, child``: ``sampling.mode: colocate`` with several ranks: the rank's engine in a
  child process, weights by gloo broadcast in ``sampling.sync_bucket_mb`` buckets through
  vLLM's weight-transfer routes (``rlvr.sampling.transfer``);
- ``broadcast, server``: ``sampling.mode: server``: the same broadcast into vLLM's OpenAI server
  process, its control plane over HTTP;
- ``shared, child`` and ``shared, server``: the same two with ``sampling.sync_transport: shared``
  (the default on one host's CPU): each bucket through one of two shared-memory buffers that the
  workers map, no collective;
- ``in-process``: one rank, the engine inside the trainer's process: tensors handed over.

Models: SmolLM2-135M-Instruct (the demo's), Qwen2.5-Coder-0.5B-Instruct (``rlvr model pull
qwen2.5-coder-0.5b-instruct``: q/k/v biases, an untied output head; ``--models qwen-coder-0.5b``)
and a random-init model shaped like Qwen2.5-1.5B (28 layers, hidden 1536, vocabulary 151936,
tied embeddings). Each figure is the median of ``--repeats`` syncs after a first, untimed one,
each way in its own process; for the two real models the weights are then moved far and synced once more, and the sampler's log-probs
of 16 sampled tokens must equal the trainer's within 1e-3 (a wrong sync fails the benchmark). Run from the repository root:

    .venv/bin/python benchmarks/bench_sync.py                     # both models, ~10 min
    .venv/bin/python benchmarks/bench_sync.py --models smollm2    # ~3 min
    .venv/bin/python benchmarks/bench_sync.py --models qwen-coder-0.5b --ways in-process shared-child broadcast-child
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAYS = ["files", "broadcast-child", "shared-child", "broadcast-server", "shared-server", "in-process"]
LABELS = {"files": "files (anchor)", "broadcast-child": "broadcast, child", "shared-child": "shared, child",
          "broadcast-server": "broadcast, server", "shared-server": "shared, server", "in-process": "in-process"}
MODELS = ["smollm2", "qwen-coder-0.5b", "qwen1.5b"]
SHAPE_ONLY = "qwen2.5-1.5b-shape"
QWEN_15B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096, tie_word_embeddings=True)


def make_models(names: list[str], work: Path) -> dict[str, str]:
    from rlvr.models.hub import resolve_model

    paths = {}
    if "smollm2" in names:
        paths["smollm2"] = str(resolve_model("smollm2-135m-instruct"))
    if "qwen-coder-0.5b" in names:  # the real one: q/k/v biases, untied output head
        paths["qwen-coder-0.5b"] = str(resolve_model("qwen2.5-coder-0.5b-instruct"))
    if "qwen1.5b" in names:
        import torch
        from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

        folder = work / SHAPE_ONLY
        torch.manual_seed(0)
        Qwen2ForCausalLM(Qwen2Config(**QWEN_15B)).save_pretrained(folder)
        AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct")).save_pretrained(folder)
        paths["qwen1.5b"] = str(folder)
    return paths


def worker(model_path: str, way: str, bucket_mb: int, repeats: int, check: bool) -> dict:
    """One way, one model, in this process: time ``repeats`` syncs after a warm-up one."""
    if way == "files":  # the anchor sends a function (the tied-head repack) to vLLM's worker process
        os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.sampling.samplers import VLLMSampler
    from rlvr.sampling.transfer.receiver import repack_in_worker
    from rlvr.training.policy import exported_weights

    model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32)
    nbytes = sum(p.numel() * p.element_size() for _, p in exported_weights(model, zero3=False))
    proc = None
    transport = "shared" if way.startswith("shared-") else "broadcast"
    if way.endswith("-server"):
        from rlvr.sampling.server import SamplerProcess, ServerSampler, server_command, server_env
        from rlvr.models.distributed import free_port

        from rlvr.sampling.auth import new_secret

        port, secret = free_port(), new_secret()
        proc = SamplerProcess(server_command(model_path, port=port, max_model_len=256, dtype="float32", seed=0,
                                             gpu_memory_utilization=0.1, on_cpu=True, kv_cache_bytes=1 << 30),
                              server_env(devices=None, on_cpu=True, secret=secret),
                              Path(tempfile.gettempdir()) / f"bench-sync-{port}.log", port)
        proc.wait_ready(900)
        sampler = ServerSampler([proc.url], secret=secret, rank=0, world=1, timeout_s=900,
                                bucket_bytes=bucket_mb << 20, processes=[proc], transport=transport)
    else:
        sampler = VLLMSampler(model_path, max_model_len=256, seed=0, gpu_memory_utilization=0.1, kv_cache_bytes=1 << 30,
                              in_process=way == "in-process", on_cpu=True, dtype="float32",
                              bucket_bytes=bucket_mb << 20, transport=transport)

    def via_files():
        from safetensors.torch import save_file

        folder = tempfile.mkdtemp(prefix="rlvr-bench-sync-", dir="/dev/shm")
        try:
            save_file({k: v.contiguous() for k, v in exported_weights(model, zero3=False)},
                      os.path.join(folder, "model.safetensors"))
            sampler.llm.collective_rpc("reload_weights", kwargs={"weights_path": folder})
            sampler.llm.collective_rpc(repack_in_worker)
            sampler.llm.reset_prefix_cache()
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    sync = via_files if way == "files" else lambda: sampler.load_weights(exported_weights(model, zero3=False))
    times = []
    try:
        with torch.no_grad():
            for i in range(repeats + 1):
                for p in model.parameters():  # new weights every time, as after an optimizer step
                    p.add_(torch.randn_like(p), alpha=1e-3)
                start = time.perf_counter()
                sync()
                if i:
                    times.append(time.perf_counter() - start)
            worst = None
            if check:  # move the weights far, sync, and compare log-probs of sampled tokens
                for p in model.parameters():
                    p.add_(torch.randn_like(p), alpha=2e-3)  # far enough to change the samples, not chaotic
                sync()
                prompt = [1, 2, 3, 4, 5]
                sample = sampler.generate([prompt], n=1, temperature=1.0, top_p=1.0, max_tokens=16, seed=1,
                                          logprobs=True)[0][0]
                ids = torch.tensor([prompt + list(sample.token_ids)])
                logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
                ours = torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt):, None])[:, 0]
                worst = (ours - torch.tensor(sample.logprobs)).abs().max().item()
    finally:
        sampler.close()
    return {"median_s": statistics.median(times), "times": times, "bytes": nbytes, "logprob_max_diff": worst}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["smollm2", "qwen1.5b"], choices=MODELS)
    p.add_argument("--ways", nargs="+", default=WAYS, choices=WAYS)
    p.add_argument("--bucket-mb", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "sync.json")
    p.add_argument("--_worker", nargs=2, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a._worker:
        model_path, way = a._worker
        real = not model_path.endswith(SHAPE_ONLY)  # random-init weights have no log-probs worth comparing
        print("RESULT " + json.dumps(worker(model_path, way, a.bucket_mb, a.repeats, real)))
        return 0
    work = Path(tempfile.mkdtemp(prefix="rlvr-bench-sync-"))
    results: dict[str, dict[str, dict]] = {}
    try:
        for name, path in make_models(a.models, work).items():
            for way in a.ways:
                print(f"{name}: {way} ...", end=" ", flush=True)
                cmd = [sys.executable, __file__, "--_worker", path, way, "--bucket-mb", str(a.bucket_mb),
                       "--repeats", str(a.repeats)]
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
                line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
                if done.returncode or line is None:  # e.g. out of memory: say so, measure the other ways
                    why = failure(done)
                    print(f"FAILED: {why}")
                    results.setdefault(name, {})[way] = {"failed": why}
                    continue
                results.setdefault(name, {})[way] = r = json.loads(line[len("RESULT "):])
                print(f"{r['median_s']:.2f} s")
                if r["logprob_max_diff"] is not None and not r["logprob_max_diff"] < 1e-3:
                    print(f"{name} {way}: after a sync the sampler's log-probs differ from the trainer's by "
                          f"{r['logprob_max_diff']:.2g}: the sync is wrong")
                    return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nweight sync, CPU fp32, bucket {a.bucket_mb} MiB, median of {a.repeats} (2 cores, {os.cpu_count()} CPUs seen)")
    head = f"{'model':<15} {'GB':>5} " + " ".join(f"{LABELS[w]:>18}" for w in a.ways)
    print(head + "\n" + "-" * len(head))
    for name, by_way in results.items():
        measured = [r for r in by_way.values() if "failed" not in r]
        gb = measured[0]["bytes"] / 1e9 if measured else float("nan")
        anchor = by_way.get("files", {}).get("median_s")
        cells = []
        for w in a.ways:
            r = by_way[w]
            if "failed" in r:
                cells.append("failed")
                continue
            ratio = f" ({r['median_s'] / anchor:.2f}x)" if anchor else ""
            cells.append(f"{r['median_s']:7.2f} s{ratio:>9}")
        print(f"{name:<15} {gb:5.2f} " + " ".join(f"{c:>18}" for c in cells))
    print("(x): time relative to the files anchor; lower is faster")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"bucket_mb": a.bucket_mb, "repeats": a.repeats, "results": results}, indent=2))
    return 0


def failure(done: subprocess.CompletedProcess) -> str:
    """One line on why a way's worker failed: its last line of error output (a vLLM worker killed
    for memory shows as a cancelled collective_rpc; the kernel log says which)."""
    text = done.stderr
    if done.returncode in (-9, 137):
        return "killed (SIGKILL: out of memory?)"
    lines = [ln.strip() for ln in text.splitlines() if ("Error" in ln or "Exception" in ln) and "Warning" not in ln]
    return (lines[-1] if lines else f"exit status {done.returncode}")[:200]


if __name__ == "__main__":
    sys.exit(main())
