"""Log-probs from the model's full logits vs from the output head in chunks: time and memory.

One training forward+backward of SmolLM2-135M-Instruct (fp32, CPU) on 32 completions of up to
64 tokens (K=8 completions of 4 prompts, lengths drawn 8..64), through rlvr's learner: log-probs
at T = 0.8 and the entropy, as a step takes them. Each way runs in a process of its own, 3 times;
it reports the best time and the process's peak RSS (``ru_maxrss``) above the RSS after the
model loaded::

    .venv/bin/python benchmarks/bench_logprobs.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys


def worker(chunk: int, model_name: str) -> None:
    import random
    import resource
    import time

    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.models.hub import resolve_model
    from rlvr.recipe.spec import AlgorithmConfig
    from rlvr.training.learner import Learner

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model(model_name), dtype=torch.float32)
    model.config.use_cache = False
    rng = random.Random(0)
    groups = [[rng.randrange(1000, 2000) for _ in range(30)] for _ in range(4)]
    prompts = [p for p in groups for _ in range(8)]
    completions = [[rng.randrange(1000, 2000) for _ in range(rng.randint(8, 64))] for _ in range(32)]
    learner = Learner(None, AlgorithmConfig(), micro_batch_size=32, temperature=0.8, pad_id=0, device="cpu",
                      share_prompts=True, logprob_chunk_tokens=chunk)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        logp, mask, entropy = learner.logprobs(model, prompts, completions, want_entropy=True)
        (-(logp * mask).sum() / mask.sum()).backward()
        model.zero_grad(set_to_none=True)
        best = min(best, time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"chunk": chunk, "seconds": best, "peak_above_load_mib": (peak - loaded) / 1024}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--_worker", type=int, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a._worker is not None:
        return worker(a._worker, a.model)
    results = []
    for chunk in (0, 1024, 256):
        done = subprocess.run([sys.executable, __file__, "--model", a.model, "--_worker", str(chunk)],
                              capture_output=True, text=True, check=True)
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    full = results[0]
    for r in results:
        name = "full logits" if r["chunk"] == 0 else f"head in chunks of {r['chunk']}"
        print(f"{name:<24} {r['seconds']:6.2f} s ({r['seconds'] / full['seconds']:.2f}x)  "
              f"peak RSS +{r['peak_above_load_mib']:6.0f} MiB ({r['peak_above_load_mib'] / full['peak_above_load_mib']:.2f}x)")


if __name__ == "__main__":
    main()
