"""The GPU check: what must work on a GPU, and rlvr's step time against TRL's, in one run.

Parts, each in a process of its own with its own time limit and a fresh work folder; each
part's result is written (``gpu_check.json`` and ``gpu_check.md`` in ``--out``) as it ends, so a
run cut short still reports what finished:

- ``doctor``: ``rlvr doctor --smoke`` (versions, GPUs, decisions; 2 steps of a tiny model with
  the HF sampler: full fine-tuning, LoRA, a ``reward_model`` reward on the same device; vLLM's
  cases where vLLM is installed);
- ``rlvr-full``: a random-init Llama of the ``--shape`` (default 1.4B: 24 layers of 2048)
  trained ``--steps`` steps with the HF sampler, ``model.dtype: auto`` (bfloat16 under
  DeepSpeed's bf16 mode on a GPU);
- ``rlvr-static``: the same with ``sampling.hf_static_cache`` (a static key/value cache, so
  transformers compiles the decoding step on a GPU);
- ``rlvr-lora``: the same with LoRA (r 16 on q, k, v, o);
- ``rlvr-zero3-offload``: the same at ZeRO-3 with the optimizer offloaded to the CPU
  (DeepSpeed's CPU Adam, compiled on first use);
- ``trl``: TRL's ``RLOOTrainer`` on the same model, prompts, shapes and reward, bf16, sampling
  with transformers ``generate`` too.

Both sides: ``--prompts`` prompts x ``--k`` samples a step, up to ``--max-tokens`` new tokens,
temperature 1, one optimizer step a batch, micro-batches of ``--micro``, no KL, the
sequence-level loss TRL's RLOO uses. Random weights earn no task reward, so both sides are
rewarded by a hash of the completion's text (``rlvr.api.smoke.text_hash``): it varies
between samples, so every group has a gradient and neither side can skip a sequence. Per side:
the median step time over the steps after the first, generation's share, and the peak GPU
memory; the headline is rlvr's step time as a multiple of TRL's.

    python benchmarks/gpu_check.py --out results/          # on a GPU machine (about 8 min on an H200)
    python benchmarks/gpu_check.py --cpu --out results/    # this script end to end on a CPU, tiny shapes

docs/clusters.md ("Checking a GPU machine") says how to carry rlvr to a GPU machine without a
network (``make gpu-wheels``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("rlvr-full", "rlvr-static", "trl", "doctor", "rlvr-lora", "rlvr-zero3-offload", "generate")


def questions(n: int) -> list[dict]:
    """The prompts both sides train on: two-term sums, in a fixed order."""
    return [{"question": f"What is {a} + {b}? Put the answer in \\boxed{{}}.", "answer": str(a + b)}
            for a, b in ((7 * i % 89 + 10, 13 * i % 97 + 10) for i in range(n))]


# ----------------------------------------------------------------------------- workers
def rlvr_worker(config: dict) -> dict:
    """One rlvr part in this process: train, then what the run's metrics say."""
    import torch

    from rlvr.api import train
    from rlvr.api.smoke import text_hash

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    recipe = {
        "name": config["part"],
        "task": {"name": "sums"},
        "prompt": {"template": "{{question}}"},
        "rewards": {"text_hash": 1.0},
        "model": {"name": config["model"], **({"lora": {"r": 16, "alpha": 32}} if config["lora"] else {})},
        "sampling": {"backend": "hf", "num_generations": config["k"], "max_tokens": config["max_tokens"],
                     "temperature": 1.0, "top_p": 1.0, "hf_static_cache": config.get("static_cache", False)},
        "trainer": {"steps": config["steps"], "rollout_batch_size": config["prompts"] * config["k"],
                    "micro_batch_size": config["micro"], "lr": 1e-6, "schedule": "constant",
                    "zero_stage": config["zero_stage"], "offload_optimizer": config["offload"],
                    "save_every": 1000, "final_checkpoint": "none", "samples_every": 0, "report_to": []},
        "algorithm": {"kl": {"beta": 0.0}, "loss_aggregation": "seq_mean_token_sum"},
    }
    rows = questions(config["prompts"] * config["steps"])
    result = train(recipe, rewards={"text_hash": text_hash}, tasks={"sums": {"train": rows, "test": rows[:4]}},
                   output_dir=config["work"] + "/run")
    del result
    return run_figures(Path(config["work"]) / "run")


def run_figures(run: Path) -> dict:
    """What an rlvr run's metrics.jsonl says so far (a run cut short still has its steps)."""
    import torch

    path = run / "metrics.jsonl"
    metrics = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return {
        "step_s": [m["time_step"] for m in metrics],
        "generate_s": [m["time_generate"] for m in metrics],
        "train_s": [m["time_train"] for m in metrics],
        "sync_s": [m.get("time_sync") for m in metrics],
        "grad_norm": [m["grad_norm"] for m in metrics],
        "completion_len": [m["completion_len_mean"] for m in metrics],
        "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
    }


def trl_worker(config: dict) -> dict:
    """TRL's ``RLOOTrainer`` on the same model, prompts, shapes and reward."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import RLOOConfig, RLOOTrainer

    from rlvr.api.smoke import text_hash

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    tokenizer = AutoTokenizer.from_pretrained(config["model"])
    rows = questions(config["prompts"] * config["steps"])
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": r["question"]}]} for r in rows])
    step_s, generate_s, grad_norms, marks = [], [], [], {}

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            marks["begin"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            step_s.append(time.perf_counter() - marks["begin"])
            Path(config["work"], "partial.json").write_text(json.dumps({"step_s": step_s, "generate_s": generate_s}))

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "grad_norm" in logs:
                grad_norms.append(logs["grad_norm"])

    def reward(completions, **kwargs):
        return text_hash(completions)

    reward.__name__ = "text_hash"
    args = RLOOConfig(
        output_dir=config["work"] + "/out", use_cpu=not cuda, bf16=cuda, fp16=False,
        model_init_kwargs={"dtype": "bfloat16" if cuda else "float32"},
        per_device_train_batch_size=config["micro"],
        gradient_accumulation_steps=config["prompts"] * config["k"] // config["micro"],
        num_generations=config["k"], max_completion_length=config["max_tokens"],
        temperature=1.0, top_p=1.0, top_k=0, learning_rate=1e-6, lr_scheduler_type="constant", weight_decay=0.0,
        max_grad_norm=1.0, beta=0.0, num_iterations=1, shuffle_dataset=False, seed=0, max_steps=config["steps"],
        logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
    )
    trainer = RLOOTrainer(model=config["model"], reward_funcs=[reward], args=args, train_dataset=data,
                          processing_class=tokenizer, callbacks=[Timer()])
    original = trainer._generate

    def timed(prompts):
        start = time.perf_counter()
        out = original(prompts)
        generate_s.append(time.perf_counter() - start)
        return out

    trainer._generate = timed
    trainer.train()
    return {"step_s": step_s, "generate_s": generate_s, "grad_norm": grad_norms,
            "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}


def generate_worker(config: dict) -> dict:
    """The floor for both sides' sampling: transformers ``generate`` alone on the model in the
    trainer's dtype, one batch of every prompt x k, timed twice (the first warms up)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cuda = torch.cuda.is_available()
    tokenizer = AutoTokenizer.from_pretrained(config["model"], padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(config["model"], dtype=torch.bfloat16 if cuda else torch.float32)
    model.to("cuda" if cuda else "cpu").eval()
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": r["question"]}], tokenize=False,
                                           add_generation_prompt=True) for r in questions(config["prompts"])]
    batch = tokenizer(texts, return_tensors="pt", padding=True).to(model.device)
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**batch, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                 max_new_tokens=config["max_tokens"], num_return_sequences=config["k"],
                                 pad_token_id=tokenizer.pad_token_id)
        if cuda:
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    finite = bool(torch.isfinite(model(**batch).logits.float()).all())
    return {"generate_s": seconds, "new_tokens": int(out.shape[1] - batch["input_ids"].shape[1]),
            "logits_finite": finite}


# ----------------------------------------------------------------------------- the parent
def part_config(part: str, a, model: Path, work: Path) -> dict:
    return {"part": part, "model": str(model), "work": str(work), "prompts": a.prompts, "k": a.k,
            "max_tokens": a.max_tokens, "micro": a.micro, "steps": a.steps, "lora": part == "rlvr-lora",
            "static_cache": part == "rlvr-static",
            "zero_stage": 3 if part == "rlvr-zero3-offload" else 0, "offload": part == "rlvr-zero3-offload"}


def run_part(part: str, a, model: Path, work: Path, timeout_s: float) -> dict:
    """One part in a child process, within ``timeout_s``; its result or the reason it failed."""
    work.mkdir(parents=True)
    log = work / "output.log"
    start = time.perf_counter()
    if part == "doctor":
        cmd = [sys.executable, "-m", "rlvr.cli", "doctor", "--smoke", "--json", "--work-dir", str(work / "smoke"),
               "--timeout", str(max(30, (timeout_s - 15) / max(1, len(a.doctor_cases) or 3)))] + [arg for c in a.doctor_cases for arg in ("--case", c)]
    else:
        config = work / "config.json"
        config.write_text(json.dumps(part_config(part, a, model, work)))
        cmd = [sys.executable, __file__, "--_worker", str(config)]
    with open(log, "wb") as sink:
        try:
            done = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout_s,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=work)
        except subprocess.TimeoutExpired:
            return {"ok": False, "seconds": time.perf_counter() - start, "reason": f"over its {timeout_s:.0f} s",
                    **_partial(part, work)}
    seconds = time.perf_counter() - start
    text = log.read_text(errors="replace")
    if part == "doctor":
        start_json = text.find("{\n")
        found = json.loads(text[start_json:]) if start_json >= 0 else {}
        smoke = found.get("smoke", [])
        return {"ok": done.returncode == 0 and bool(smoke), "seconds": seconds, "smoke": smoke,
                "decisions": found.get("decisions"), "gpus": found.get("gpus"), "packages": found.get("packages"),
                **({} if done.returncode == 0 else {"reason": _tail(text)})}
    result_file = work / "config.json.result"
    if done.returncode != 0 or not result_file.exists():
        return {"ok": False, "seconds": seconds, "reason": _tail(text), **_partial(part, work)}
    return {"ok": True, "seconds": seconds, **json.loads(result_file.read_text())}


def _partial(part: str, work: Path) -> dict:
    """The steps a part cut short (or failed) had finished."""
    if part == "doctor":
        return {}
    if part == "trl":
        path = work / "partial.json"
        return json.loads(path.read_text()) if path.exists() else {}
    found = run_figures(work / "run")
    found.pop("peak_gpu_gib")
    return found


def _tail(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or line.startswith("rlvr: error")]
    return (errors or lines or ["no output"])[-1].strip()[:500]


def summarise(results: dict) -> list[str]:
    """The table: one row per part, then rlvr against TRL."""
    lines = ["| part | ok | wall s | s/step (median after the 1st) | generation share | peak GPU GiB | note |",
             "|---|---|---|---|---|---|---|"]
    medians = {}
    for part, r in results.items():
        if part.startswith("_"):
            continue
        step = gen = None
        note = ""
        if part == "generate" and r.get("generate_s"):
            note = f"{r['generate_s'][-1]:.2f} s for {r.get('new_tokens')} new tokens, logits finite: {r.get('logits_finite')}"
        if r.get("step_s"):
            later = r["step_s"][1:] or r["step_s"]
            step = statistics.median(later)
            medians[part] = step
            if r.get("generate_s"):
                gen = statistics.median(r["generate_s"][1:] or r["generate_s"]) / step if step else None
        if r.get("grad_norm"):
            bad = [g for g in r["grad_norm"] if not isinstance(g, (int, float)) or g != g or abs(g) == float("inf")]
            note = f"{note} grad norm non-finite in {len(bad)} of {len(r['grad_norm'])} steps" if bad else note
        note = f"{r['reason']} {note}".strip() if r.get("reason") else note
        if part == "doctor" and r.get("smoke"):
            note = "; ".join(f"{s['case']} {'pass' if s['ok'] else 'FAIL ' + s['reason'][:120]}" for s in r["smoke"])
        peak = r.get("peak_gpu_gib")
        cells = ["yes" if r["ok"] else "NO", f"{r['seconds']:.0f}", "-" if step is None else f"{step:.2f}",
                 "-" if gen is None else f"{gen:.0%}", "-" if peak is None else f"{peak:.1f}", note]
        lines.append(f"| {part} | " + " | ".join(cells) + " |")
    for side in ("rlvr-full", "rlvr-static"):
        if side in medians and "trl" in medians:
            lines.append("")
            lines.append(f"rlvr's step / TRL's ({side}): {medians[side] / medians['trl']:.2f}x (target <= 0.67x)")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu_check"),
                   help="where gpu_check.json and gpu_check.md go (a new or empty folder)")
    p.add_argument("--work", type=Path, help="the model and each part's folder and log (default: OUT/work)")
    p.add_argument("--cpu", action="store_true", help="run on the CPU with tiny shapes (checks this script)")
    p.add_argument("--shape", default=None, help="rlvr.models.tiny.SHAPES (default 1.4b; tiny with --cpu)")
    p.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts of {', '.join(PARTS)}")
    p.add_argument("--prompts", type=int)
    p.add_argument("--k", type=int)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--micro", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--budget", type=float, default=480.0, help="seconds for the whole check; parts that do not "
                   "fit are reported as not run")
    p.add_argument("--doctor-case", dest="doctor_cases", action="append", default=[])
    p.add_argument("--_worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a._worker:
        config = json.loads(Path(a._worker).read_text())
        worker = {"trl": trl_worker, "generate": generate_worker}.get(config["part"], rlvr_worker)
        result = worker(config)
        Path(a._worker + ".result").write_text(json.dumps(result))
        return 0
    small = dict(prompts=2, k=4, max_tokens=16, micro=4, steps=2) if a.cpu else \
        dict(prompts=16, k=8, max_tokens=256, micro=16, steps=3)
    for key, value in small.items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    a.shape = a.shape or ("tiny" if a.cpu else "1.4b")
    if a.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        a.doctor_cases = a.doctor_cases or ["hf-full"]
    parts = [x for x in a.only.split(",") if x]
    unknown = [x for x in parts if x not in PARTS]
    if unknown:
        print(f"gpu_check: unknown part {unknown[0]!r}: {', '.join(PARTS)}", file=sys.stderr)
        return 2
    if a.out.exists() and any(a.out.iterdir()):
        print(f"gpu_check: {a.out} is not empty: name a new folder", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    work = a.work or a.out / "work"
    if work.exists() and any(work.iterdir()):
        print(f"gpu_check: {work} is not empty: name a new folder", file=sys.stderr)
        return 2
    deadline = time.monotonic() + a.budget
    from rlvr.models.tiny import build_tiny_model

    start = time.perf_counter()
    model = build_tiny_model(work / "model", a.shape, dtype="float32" if a.cpu else "bfloat16")
    results: dict = {"_setup": {"shape": a.shape, "model_build_s": time.perf_counter() - start,
                                "prompts": a.prompts, "k": a.k, "max_tokens": a.max_tokens, "micro": a.micro,
                                "steps": a.steps, "date": time.strftime("%Y-%m-%d %H:%M")}}
    # the parts' shares of what is left, from an H200 at 1.4B (2026-11-28): each of rlvr's and TRL's
    # steps ~35 s, start-up ~35 s; the doctor's three cases ~25 s each; generate ~60 s
    shares = {"rlvr-full": 1.4, "rlvr-static": 1.4, "trl": 1.3, "doctor": 0.9, "rlvr-lora": 1.3, "rlvr-zero3-offload": 1.5, "generate": 0.6}
    for i, part in enumerate(parts):
        left = deadline - time.monotonic()
        weight = shares[part] / sum(shares[x] for x in parts[i:])
        timeout = max(20.0, left * weight - 5)
        if left < 25:
            results[part] = {"ok": False, "seconds": 0.0, "reason": "no time left in --budget"}
        else:
            print(f"gpu_check: {part} (up to {timeout:.0f} s) ...", flush=True)
            results[part] = run_part(part, a, model, work / part, timeout)
        (a.out / "gpu_check.json").write_text(json.dumps(results, indent=2))
        table = summarise(results)
        (a.out / "gpu_check.md").write_text("\n".join(table) + "\n")
        print("\n".join(table[:2] + [table[2 + i]] if len(table) > 2 + i else table), flush=True)
    print("\n".join(summarise(results)))
    return 0 if all(r.get("ok") for k, r in results.items() if not k.startswith("_")) else 1


if __name__ == "__main__":
    sys.exit(main())
