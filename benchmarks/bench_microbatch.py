"""What one more micro-batch costs: forward+backward time of the policy against tokens.

Times one forward (final hidden states, as the trainer takes them) and backward of
SmolLM2-135M-Instruct (fp32, this machine's CPU threads) on random token batches of several
shapes, best of 3 each, and fits ``time = per_call + per_token * tokens`` by least squares over
the batches of 256 tokens or more. ``per_call / per_token`` is the overhead, in tokens, that
``trainer.micro_batch_overhead_tokens`` means (rlvr/training/engine.py keeps the CPU default)::

    .venv/bin/python benchmarks/bench_microbatch.py
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.models.hub import resolve_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    a = p.parse_args()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model(a.model), dtype=torch.float32)
    model.config.use_cache = False
    vocab = model.config.vocab_size

    def seconds(b: int, t: int) -> float:
        ids = torch.randint(0, vocab, (b, t))
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            hidden = model(input_ids=ids, output_hidden_states=True, logits_to_keep=1).hidden_states[-1]
            hidden.float().pow(2).mean().backward()
            model.zero_grad(set_to_none=True)
            best = min(best, time.perf_counter() - start)
        return best

    seconds(2, 8)  # warm-up
    points = []
    for b, t in [(1, 16), (4, 16), (16, 16), (16, 32), (8, 64), (64, 8), (32, 32)]:
        s = seconds(b, t)
        points.append((b * t, s))
        print(f"B={b:3d} T={t:3d} tokens={b * t:5d}  {s * 1000:8.1f} ms  {s * 1000 / (b * t):6.2f} ms/token", flush=True)
    fit = [(n, s) for n, s in points if n >= 256]
    mean_n = sum(n for n, _ in fit) / len(fit)
    mean_s = sum(s for _, s in fit) / len(fit)
    per_token = sum((n - mean_n) * (s - mean_s) for n, s in fit) / sum((n - mean_n) ** 2 for n, _ in fit)
    per_call = mean_s - per_token * mean_n
    print(f"fit over batches of 256+ tokens: {per_call * 1000:.0f} ms a call + {per_token * 1000:.2f} ms a token "
          f"= an overhead of {per_call / per_token:.0f} tokens per micro-batch")


if __name__ == "__main__":
    main()
