"""rlvr vs TRL's ``RLOOTrainer``, side by side on this machine, alternating.

The sides train SmolLM2-135M-Instruct (or ``--model``'s, the same on every side) in fp32 on CPU
(every weight, or with ``--lora R`` the same LoRA adapters: rank R, alpha 2R, no dropout, on every
projection; TRL's through its ``peft_config``) with RLOO on rlvr's ``arithmetic`` task,
rewarded by rlvr's ``math`` reward, with the same prompt (system + user chat messages), the
same prompts in the same order every step, K samples per prompt, P prompts per optimizer
step (one optimizer step per generation batch, same micro-batch size), temperature 1.0,
top-p 1.0, the same completion-token limit, learning rate, constant schedule, no warm-up,
gradient clipping at 1.0, no weight decay, beta = 0 (no reference model), one pass over
each batch, and the same loss: the sequence-level REINFORCE loss TRL's RLOO uses
(per-sequence sum of token log-probs, averaged over sequences; rlvr:
``algorithm.loss_aggregation=seq_mean_token_sum``, no clipping). The sides:

- ``rlvr``: colocated and synchronous (``sampling.mode: colocate``, ``max_staleness: 0``):
  vLLM inside the trainer's process; sample, train, sync the weights, in turn;
- ``rlvr-bf16``: ``rlvr`` computing in bfloat16, which is what rlvr's defaults
  (``sampling.dtype`` and ``model.dtype`` ``auto``) pick on CPUs with bf16 instructions: the
  sampler in bfloat16, the trainer's forward and backward under bfloat16 autocast over float32
  weights and optimizer (the output head of the log-probs stays float32). Sampler and trainer then compute in the same
  dtype, so ``algorithm.is_correction.mode: auto`` adds no importance weights (the mismatch is
  still measured). Run only on CPUs with bf16 instructions (elsewhere vLLM's bf16 is several
  times slower and autocast gains nothing), unless named by ``--only``;
- ``rlvr-server``: the same recipe as ``rlvr`` plus ``sampling.mode: server`` and
  ``sampling.max_staleness: 1``: vLLM's OpenAI server in a process of its own (the trainer
  starts it), drawing step s + 1 on the weights of step s while the trainer trains step s;
  the weights travel by collective broadcast. Its samples are one step old, so rlvr's default
  ``algorithm.is_correction.mode: auto`` weighs its loss by truncated importance weights
  (tis, cap 2) against the sampler's log-probs; the other two sides train on-policy;
- ``trl``: TRL's ``RLOOTrainer``, sampling with transformers ``generate`` on the model it trains.

Each run is a process of its own: rlvr as ``python -m rlvr.cli train`` on a recipe written
to a temporary folder (every setting that matters is set there, nothing comes from
tasks/demo.yaml), TRL as this script with ``--_trl-worker``. Per side it reports:

- start-up: process launch to the start of the first step (imports, model load, vLLM
  engine or server start for rlvr); excluded from the per-step figures;
- s/step: median (and mean) over the steps after the first one of each run; gen s: the
  median generation time (for ``rlvr-server`` it overlaps training, so it is not part of
  s/step);
- reward: mean reward over the last half of each run's steps (averaged over rounds);
- peak memory: the peak of the summed RSS (and PSS) of the process tree, sampled every 2 s
  (includes the math-reward worker processes and, for ``rlvr-server``, the sampler and
  vLLM's engine process; RSS counts shared pages once per process), and the largest peak
  RSS of one process (``wait4``'s ``ru_maxrss``: Linux reports the largest over the main
  process and every descendant it reaped, so for ``rlvr-server`` it may be the sampler's);
- both rlvr sides, over the steps after the first: weight-sync time (trainer -> vLLM), the
  trainer's wait for samples and the sampler's wait for weights, each as a fraction of step
  time (summed over steps, divided by the summed step time), and the staleness of the
  samples (optimizer steps between the sampler's weights and the trainer's: mean, max).
  For ``rlvr`` the wait for samples is its generation and scoring time. Also the trainer's
  share of the step, the fraction of sequences it skipped (advantage 0: no gradient, not
  forwarded) and the padding among the tokens it put through the model (``metrics.jsonl``).

Targets (from the issue, on CPU): rlvr <= 0.33x TRL's time per step at equal or better
reward; weight sync <= 10% of step time. Both are checked for each rlvr side. Run from the
repository root:

    .venv/bin/python benchmarks/bench_trl.py                 # every side, one round each
    .venv/bin/python benchmarks/bench_trl.py --rounds 2      # alternate twice
    .venv/bin/python benchmarks/bench_trl.py --only rlvr-server   # one side (rlvr, rlvr-bf16, rlvr-server or trl)
    .venv/bin/python benchmarks/bench_trl.py --steps 2 --prompts 1 --k 4 --max-tokens 16   # smoke
    .venv/bin/python benchmarks/bench_trl.py --model qwen2.5-coder-0.5b-instruct --sides rlvr,rlvr-bf16,trl \
        --steps 3 --prompts 2 --k 8 --max-tokens 64         # the 0.5B row
    .venv/bin/python benchmarks/bench_trl.py --model qwen2.5-coder-0.5b-instruct --sides rlvr,rlvr-bf16,trl \
        --steps 3 --prompts 2 --k 8 --max-tokens 64 --lora 16 --lr 1e-4   # the same with LoRA on both sides

Needs TRL (``pip install trl==1.16.0``) unless ``--only`` names an rlvr side; ``make bench``
installs it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRL_VERSION = "1.16.0"
MODEL = "smollm2-135m-instruct"
# The task and prompt, fixed here (tasks/demo.yaml may change under us).
TASK = "arithmetic"
TASK_OPTIONS = {"size": 4000, "max_operand": 20, "operations": "+-", "terms": 2}
# Prompt templates over a row, as in a recipe ({{column}} fields, other braces literal).
SYSTEM = "Reply with only the number."
EXTRACT = "auto"  # the math reward reads the last number when there is no boxed/tagged answer
TEMPLATE = "{{question}}"
POLL_S = 2.0  # reading smaps (PSS) of a vLLM process costs CPU: poll sparingly
RLVR_SIDES = ("rlvr", "rlvr-bf16", "rlvr-server")
SIDES = (*RLVR_SIDES, "trl")  # the order each round runs them in
SERVER_SAMPLING = {"mode": "server", "max_staleness": 1}  # rlvr-server: the rlvr recipe plus these
TARGET_RATIO, TARGET_SYNC = 0.33, 0.10  # the issue's CPU targets: s/step vs TRL, sync share of a step
# --lora R: adapters of rank R (alpha 2R, no dropout) on every projection, on both sides
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


# ---------------------------------------------------------------------------- shared helpers
def model_of(a: argparse.Namespace) -> str:
    return getattr(a, "model", None) or MODEL


def micro_batch(total: int, cap: int = 16) -> int:
    """The largest divisor of ``total`` up to ``cap`` (sequences per forward/backward)."""
    return max(d for d in range(1, min(cap, total) + 1) if total % d == 0)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", PYTHONUNBUFFERED="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)  # a plain single-process run on both sides
    return env


def tree_memory(pid: int) -> tuple[int, int]:
    """(summed RSS, summed PSS) in bytes of a process and its descendants; (0, 0) if gone.

    ``children(recursive=True)`` walks parent pids, not sessions or process groups, so the
    rlvr-server sampler counts: rank 0 starts it with ``subprocess.Popen`` from the trainer
    process itself (``rlvr.sampling.server.SamplerProcess``), and the ``os.setsid()`` its
    ``preexec_fn`` runs gives it a session of its own but leaves its parent the trainer; vLLM's
    engine process is the sampler's child in turn."""
    try:
        import psutil
    except ImportError:
        return 0, 0
    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.Error:
        return 0, 0
    rss = pss = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
        except psutil.Error:
            pass
    return rss, pss


def run_monitored(name: str, cmd: list[str], log_path: Path, timeout: float, on_poll=None) -> dict[str, Any]:
    """Run ``cmd`` (output to ``log_path``), sampling the process tree's memory until it exits."""
    launch = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env(), cwd=ROOT,
                                start_new_session=True)
    peak_rss = peak_pss = 0
    status, usage = None, None
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            rss, pss = tree_memory(proc.pid)
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            if on_poll:
                on_poll()
            if time.time() - launch > timeout:  # rlvr-server's sampler has a session (and group) of its own
                os.killpg(proc.pid, signal.SIGTERM)  # but dies with the trainer (PR_SET_PDEATHSIG, rlvr.sampling.server)
                time.sleep(5)
                if os.wait4(proc.pid, os.WNOHANG)[0] == 0:
                    os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = -1
                raise TimeoutError(f"{name} ran past --timeout {timeout:g} s; log: {log_path}")
            time.sleep(POLL_S)
    except BaseException:
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
                os.wait4(proc.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            proc.returncode = -1
        raise
    proc.returncode = os.waitstatus_to_exitcode(status)
    if on_poll:
        on_poll()
    return {
        "launch": launch,
        "wall_s": time.time() - launch,
        "returncode": proc.returncode,
        "peak_tree_rss_bytes": peak_rss,
        "peak_tree_pss_bytes": peak_pss,
        # Linux: KiB, the largest over the child and every descendant it reaped (not only the child)
        "max_process_rss_bytes": usage.ru_maxrss * 1024,
    }


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# ---------------------------------------------------------------------------- rlvr side
def rlvr_recipe(a: argparse.Namespace, side: str) -> dict[str, Any]:
    """The recipe of an rlvr side: ``rlvr``'s, plus ``SERVER_SAMPLING`` for ``rlvr-server``."""
    from rlvr.recipe.spec import SamplingConfig

    sampling = {"backend": "vllm", "num_generations": a.k, "temperature": 1.0, "top_p": 1.0,
                "max_tokens": a.max_tokens}
    if "dtype" in SamplingConfig.model_fields:
        # fp32 as TRL (it generates with the fp32 training model); rlvr-bf16: rlvr's default here
        sampling["dtype"] = "bfloat16" if side == "rlvr-bf16" else "float32"
    if side == "rlvr-server":
        sampling.update(SERVER_SAMPLING)
    return {
        "name": "bench-trl",
        "description": f"{side} side of benchmarks/bench_trl.py",
        "task": {"name": TASK, "options": dict(TASK_OPTIONS)},
        "data": {"train_split": "train", "eval_split": "test", "seed": a.seed},
        "prompt": {"system": SYSTEM, "template": TEMPLATE},
        "rewards": {"math": {"weight": 1.0, "options": {"extract": EXTRACT}}},
        "model": {"name": model_of(a), "dtype": "bfloat16" if side == "rlvr-bf16" else "float32",
                  **({"lora": {"r": a.lora, "alpha": 2 * a.lora, "dropout": 0.0, "target_modules": LORA_TARGETS}}
                     if a.lora else {})},
        "sampling": sampling,
        "trainer": {
            "steps": a.steps, "rollout_batch_size": a.prompts * a.k, "micro_batch_size": a.micro,
            "lr": a.lr, "weight_decay": 0.0, "warmup_steps": 0, "schedule": "constant", "max_grad_norm": 1.0,
            "zero_stage": 2, "seed": a.seed, "save_every": a.steps, "keep_last": 1,
            "eval_at_start": False, "eval_at_end": False,
        },
        "algorithm": {
            "normalize_advantages": "none", "clip": None, "ppo_epochs": 1,
            "loss_aggregation": "seq_mean_token_sum", "kl": {"beta": 0.0}, "mask_truncated": False,
        },
        "eval": {"limit": 8},
    }


def run_rlvr(a: argparse.Namespace, work: Path, side: str) -> dict[str, Any]:
    import yaml

    work.mkdir(parents=True)
    recipe_path = work / "recipe.yaml"
    recipe_path.write_text(yaml.safe_dump(rlvr_recipe(a, side), sort_keys=False))
    out_dir = work / "run"
    metrics = out_dir / "metrics.jsonl"
    first_row_at: list[float] = []

    def watch():  # the wall time the first metrics row was written: start-up = that - its time_step
        if not first_row_at and metrics.exists():
            text = metrics.read_text()
            if text.endswith("\n") and text.count("\n") >= 1:
                first_row_at.append(metrics.stat().st_mtime if text.count("\n") == 1 else time.time())

    cmd = [sys.executable, "-m", "rlvr.cli", "train", str(recipe_path), "--output-dir", str(out_dir)]
    proc = run_monitored(side, cmd, work / "log.txt", a.timeout, on_poll=watch)
    if proc["returncode"] != 0:
        logs = [work / "log.txt", *sorted(out_dir.glob("sampler-*.log"))]  # rlvr-server: the sampler's too
        raise RuntimeError(f"{side} run failed (exit {proc['returncode']})" + "".join(
            f"; last lines of {path}:\n{log_tail(path)}" for path in logs))
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    if len(rows) != a.steps:
        raise RuntimeError(f"{side} wrote {len(rows)} metrics rows, expected {a.steps}")
    startup = first_row_at[0] - rows[0]["time_step"] - proc["launch"] if first_row_at else None
    return {
        **proc,
        "startup_s": startup,
        "step_s": [r["time_step"] for r in rows],
        "generate_s": [r["time_generate"] for r in rows],
        "train_s": [r["time_train"] for r in rows],
        "sync_s": [r["time_sync"] for r in rows],
        "wait_samples_s": [r["time_wait_samples"] for r in rows],
        "wait_weights_s": [r["time_wait_weights"] for r in rows],
        "staleness": [r["staleness"] for r in rows],
        "reward": [r["reward_mean"] for r in rows],
        "completion_len": [r["completion_len_mean"] for r in rows],
        "skipped": [r.get("skipped_seqs_frac") for r in rows],
        "padded": [r.get("trainer_padded_frac") for r in rows],
        "trained_tokens": [r.get("trained_tokens") for r in rows],
    }


# ---------------------------------------------------------------------------- TRL side
def trl_missing() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("trl")
    except PackageNotFoundError:
        return "TRL is not installed"
    if found != TRL_VERSION:
        print(f"note: TRL {found} installed; this benchmark was written for {TRL_VERSION}", file=sys.stderr)
    return None


def run_trl(a: argparse.Namespace, work: Path) -> dict[str, Any]:
    work.mkdir(parents=True)
    result = work / "trl.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_trl-worker", str(result),
           "--steps", str(a.steps), "--prompts", str(a.prompts), "--k", str(a.k), "--max-tokens", str(a.max_tokens),
           "--lr", str(a.lr), "--seed", str(a.seed), "--micro", str(a.micro), "--model", model_of(a),
           "--lora", str(a.lora)]
    proc = run_monitored("TRL", cmd, work / "log.txt", a.timeout)
    if proc["returncode"] != 0 or not result.exists():
        raise RuntimeError(f"TRL run failed (exit {proc['returncode']}); last lines of {work / 'log.txt'}:\n"
                           + log_tail(work / "log.txt"))
    data = json.loads(result.read_text())
    if len(data["step_s"]) != a.steps:
        raise RuntimeError(f"TRL ran {len(data['step_s'])} steps, expected {a.steps}")
    return {**proc, **data, "startup_s": data["first_step_at"] - proc["launch"]}


def trl_worker(a: argparse.Namespace) -> None:
    """One TRL RLOOTrainer run; writes per-step times and rewards to ``a._trl_worker``."""
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import RLOOConfig, RLOOTrainer

    from rlvr.host.registry import load_registry
    from rlvr.kit import completion_text
    from rlvr.kit.data import data_dir
    from rlvr.models.hub import resolve_model
    from rlvr.recipe.spec import PromptConfig
    from rlvr.recipe.template import render
    from rlvr.sampling.prompts import render_prompt
    from rlvr.training.rollout import PromptStream

    registry = load_registry()
    rows = list(registry.task(TASK).fn("train", data_dir=data_dir(), **TASK_OPTIONS))
    # rlvr's prompt order: the same prompts in the same order every step, so no shuffling here.
    order = PromptStream(len(rows), a.seed).take((a.steps + 1) * a.prompts)
    records = []
    for i in order:
        row = rows[i]
        messages = [{"role": "system", "content": render(SYSTEM, row)}, {"role": "user", "content": render(TEMPLATE, row)}]
        records.append({"prompt": messages, "answer": row["answer"]})
    model_path = resolve_model(model_of(a))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    trl_ids = tokenizer.apply_chat_template(records[0]["prompt"], add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    rlvr_ids = render_prompt(tokenizer, PromptConfig(system=SYSTEM, template=TEMPLATE), rows[order[0]])
    math_fn = registry.reward("math").fn

    def reward(prompts, completions, answer, **kwargs) -> list[float | None]:
        scores = math_fn(prompts, [completion_text(c) for c in completions], kwargs.get("completion_ids"), answer=answer,
                         extract=EXTRACT)
        return [s.value for s in scores]

    reward.__name__ = "math"

    step_s, reward_log, length_log, generate_s = [], [], [], []
    marks: dict[str, float] = {}

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            marks["begin"] = time.time()
            marks.setdefault("first", marks["begin"])

        def on_step_end(self, args, state, control, **kw):
            step_s.append(time.time() - marks["begin"])

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                reward_log.append(logs["reward"])
                length_log.append(logs.get("completions/mean_length"))

    config = RLOOConfig(
        output_dir=str(Path(a._trl_worker).parent / "out"),
        use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        model_init_kwargs={"dtype": "float32"},
        per_device_train_batch_size=a.micro,
        gradient_accumulation_steps=a.prompts * a.k // a.micro,  # one optimizer step per generation batch
        num_generations=a.k, max_completion_length=a.max_tokens,
        temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=a.lr, lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=1.0,
        beta=0.0, num_iterations=1, shuffle_dataset=False, seed=a.seed,
        max_steps=a.steps, logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0,
    )
    peft_config = None
    if a.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=a.lora, lora_alpha=2 * a.lora, lora_dropout=0.0, target_modules=LORA_TARGETS,
                                 task_type="CAUSAL_LM")
    trainer = RLOOTrainer(model=model_path, reward_funcs=[reward], args=config, peft_config=peft_config,
                          train_dataset=Dataset.from_list(records), processing_class=tokenizer, callbacks=[Timer()])
    original_generate = trainer._generate

    def timed_generate(prompts):  # generation time per step (sampling with transformers generate)
        t0 = time.perf_counter()
        out = original_generate(prompts)
        generate_s.append(time.perf_counter() - t0)
        return out

    trainer._generate = timed_generate
    trainer.train()
    import resource

    Path(a._trl_worker).write_text(json.dumps({
        "first_step_at": marks["first"],
        "step_s": step_s,
        "generate_s": generate_s,
        "reward": reward_log,
        "completion_len": length_log,
        "prompt_tokens_match_rlvr": list(trl_ids) == list(rlvr_ids),
        "trl_config": {
            "per_device_train_batch_size": config.per_device_train_batch_size,
            "gradient_accumulation_steps": config.gradient_accumulation_steps,
            "generation_batch_size": config.generation_batch_size,
            "steps_per_generation": config.steps_per_generation,
            "optim": str(config.optim),
        },
        "worker_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }))


# ---------------------------------------------------------------------------- summary
def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and v == v]
    return statistics.fmean(values) if values else None


def _counted(runs: list[dict[str, Any]], key: str) -> list[Any]:
    """A per-step series pooled over rounds, each run's first step left out."""
    return [x for r in runs for x in r[key][1:]]


def _share(runs: list[dict[str, Any]], key: str) -> float | None:
    """Seconds of ``key`` over the counted steps as a fraction of their summed step time."""
    total = sum(_counted(runs, "step_s"))
    return sum(_counted(runs, key)) / total if total else None


def summarize(runs: list[dict[str, Any]], side: str) -> dict[str, Any]:
    """Pool rounds: per-step figures after each run's first step; reward over each run's last half."""
    steps = _counted(runs, "step_s")
    last_half = [_mean(r["reward"][len(r["reward"]) // 2:]) for r in runs]
    out = {
        "side": side,
        "rounds": len(runs),
        "startup_s": _mean([r["startup_s"] for r in runs]),
        "step_s_median": _median(steps),
        "step_s_mean": _mean(steps),
        "steps_counted": len(steps),
        "generate_s_median": _median(_counted(runs, "generate_s")),
        "reward_last_half": _mean(last_half),
        "reward_all": _mean([x for r in runs for x in r["reward"]]),
        "completion_len_mean": _mean([x for r in runs for x in r["completion_len"]]),
        "peak_tree_rss_gib": max(r["peak_tree_rss_bytes"] for r in runs) / 2**30,
        "peak_tree_pss_gib": max(r["peak_tree_pss_bytes"] for r in runs) / 2**30,
        "peak_process_rss_gib": max(r["max_process_rss_bytes"] for r in runs) / 2**30,
        "wall_s": _mean([r["wall_s"] for r in runs]),
    }
    if side in RLVR_SIDES:
        staleness = _counted(runs, "staleness")
        out.update({
            "train_s_median": _median(_counted(runs, "train_s")),
            "sync_s_median": _median(_counted(runs, "sync_s")),
            "sync_fraction": _share(runs, "sync_s"),
            "wait_samples_fraction": _share(runs, "wait_samples_s"),
            "wait_weights_fraction": _share(runs, "wait_weights_s"),
            "train_fraction": _share(runs, "train_s"),
            "skipped_mean": _mean(_counted(runs, "skipped")),
            "padded_mean": _mean(_counted(runs, "padded")),
            "staleness_mean": _mean(staleness),
            "staleness_max": max(staleness, default=None),
        })
    return out


def _fmt(value, spec: str, none: str = "-") -> str:
    return none if value is None else format(value, spec)


# (header, summary key, format): the figures of every side, then those of the rlvr sides' loop
COLUMNS = [("startup s", "startup_s", ".1f"), ("s/step med", "step_s_median", ".2f"),
           ("s/step mean", "step_s_mean", ".2f"), ("gen s med", "generate_s_median", ".2f"),
           ("reward(last½)", "reward_last_half", ".3f"), ("len", "completion_len_mean", ".1f"),
           ("peak tree RSS GiB", "peak_tree_rss_gib", ".2f"), ("PSS GiB", "peak_tree_pss_gib", ".2f"),
           ("1-proc RSS GiB", "peak_process_rss_gib", ".2f")]
LOOP_COLUMNS = [("train s med", "train_s_median", ".2f"), ("train frac", "train_fraction", ".1%"),
                ("skipped seqs", "skipped_mean", ".1%"), ("padded", "padded_mean", ".1%"),
                ("sync s med", "sync_s_median", ".3f"),
                ("sync frac", "sync_fraction", ".1%"), ("wait samples", "wait_samples_fraction", ".1%"),
                ("wait weights", "wait_weights_fraction", ".1%"), ("stale mean", "staleness_mean", ".2f"),
                ("stale max", "staleness_max", "d")]


def print_table(summary: dict[str, dict[str, Any]], sides: tuple[str, ...], columns: list[tuple[str, str, str]]) -> None:
    """One row per side of ``sides`` that ran; '-' where a figure is missing."""
    widths = [max(len(h), 6) for h, _, _ in columns]
    head = f"{'side':<11} " + " ".join(f"{h:>{w}}" for (h, _, _), w in zip(columns, widths))
    print(head)
    print("-" * len(head))
    for side in sides:
        if side in summary:
            s = summary[side]
            print(f"{side:<11} " + " ".join(f"{_fmt(s.get(key), spec):>{w}}" for (_, key, spec), w in zip(columns, widths)))


def side_verdict(side: str, r: dict[str, Any], t: dict[str, Any] | None) -> dict[str, Any]:
    """An rlvr side against the targets: its sync share, and its step time and reward vs TRL's."""
    verdict: dict[str, Any] = {}
    if r.get("sync_fraction") is not None:
        verdict["sync_fraction"] = r["sync_fraction"]
        verdict["sync_ok"] = r["sync_fraction"] <= TARGET_SYNC
        print(f"{side} weight sync: {r['sync_fraction']:.1%} of step time (median {r['sync_s_median']:.3f} s/step) "
              f"-> {'PASS' if verdict['sync_ok'] else 'FAIL'} (target <= {TARGET_SYNC:.0%})")
    if t and r["step_s_median"] and t["step_s_median"]:
        ratio = r["step_s_median"] / t["step_s_median"]
        verdict["time_ratio"] = ratio
        verdict["time_ok"] = ratio <= TARGET_RATIO
        verdict["reward_ok"] = (r["reward_last_half"] or 0.0) >= (t["reward_last_half"] or 0.0)
        print(f"time per step {side}/TRL: {ratio:.3f}x (median; mean {r['step_s_mean'] / t['step_s_mean']:.3f}x) "
              f"-> {'PASS' if verdict['time_ok'] else 'FAIL'} (target <= {TARGET_RATIO:g}x)")
        print(f"reward over the last half: {side} {_fmt(r['reward_last_half'], '.3f')} vs TRL "
              f"{_fmt(t['reward_last_half'], '.3f')} -> {'PASS' if verdict['reward_ok'] else 'FAIL'} "
              "(target: equal or better; noisy with few steps)")
    return verdict


def report(summary: dict[str, dict[str, Any]], a: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Print both tables and each rlvr side's verdict; return the verdicts by side."""
    print()
    adapters = f" | LoRA r{a.lora} on every projection" if a.lora else " | full fine-tuning"
    print(f"model {model_of(a)} fp32{adapters} | task {TASK} {TASK_OPTIONS} | {a.prompts} prompts x K={a.k} a step "
          f"(micro-batch {a.micro}) | max {a.max_tokens} new tokens | lr {a.lr:g} | {a.steps} steps x {a.rounds} round(s)")
    print_table(summary, SIDES, COLUMNS)
    rlvr_sides = [side for side in RLVR_SIDES if side in summary]
    if rlvr_sides:
        print(f"\nrlvr loop, over the steps after the first (fractions of step time; "
              f"rlvr-server: {', '.join(f'sampling.{k}={v}' for k, v in SERVER_SAMPLING.items())})")
        print_table(summary, RLVR_SIDES, LOOP_COLUMNS)
        print()
    t = summary.get("trl")
    verdicts = {side: side_verdict(side, summary[side], t) for side in rlvr_sides}
    if not (t and rlvr_sides):
        print("(TRL and an rlvr side are needed for a ratio)")
    elif not t["step_s_median"] or not all(summary[side]["step_s_median"] for side in rlvr_sides):
        print("(too few steps for a ratio: run at least 2 steps)")
    return verdicts


# ---------------------------------------------------------------------------- main
def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=5, help="optimizer steps per run (default 5)")
    p.add_argument("--prompts", type=int, default=4, help="prompts per step (default 4)")
    p.add_argument("--k", type=int, default=8, help="samples per prompt (default 8)")
    p.add_argument("--max-tokens", type=int, default=64, help="max new tokens per completion (default 64)")
    p.add_argument("--micro", type=int, default=None, help="sequences per forward/backward (default: largest divisor of prompts*k up to 16)")
    p.add_argument("--rounds", type=int, default=1, help="alternations rlvr, rlvr-bf16, rlvr-server, TRL, rlvr, ... (default 1)")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--lora", type=int, default=0, metavar="R",
                   help="train LoRA adapters of rank R (alpha 2R) on every projection, on both sides (default 0: full fine-tuning)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=SIDES, default=None, help="run one side only (default: all)")
    p.add_argument("--sides", default=None, help="comma-separated sides to run, e.g. rlvr,trl (default: all)")
    p.add_argument("--model", default=MODEL, help=f"model alias, folder or hub id for both sides (default {MODEL}; "
                   "e.g. qwen2.5-coder-0.5b-instruct)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per run before it is killed")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "trl.json")
    p.add_argument("--keep", action="store_true", help="keep the runs' temporary folders (logs, metrics)")
    p.add_argument("--_trl-worker", dest="_trl_worker", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.steps < 1 or a.prompts < 1 or a.k < 2 or a.max_tokens < 1 or a.rounds < 1 or a.lora < 0:
        p.error("need --steps >= 1, --prompts >= 1, --k >= 2, --max-tokens >= 1, --rounds >= 1, --lora >= 0")
    a.micro = a.micro or micro_batch(a.prompts * a.k)
    if (a.prompts * a.k) % a.micro:
        p.error(f"--micro {a.micro} must divide prompts*k = {a.prompts * a.k}")
    if a._trl_worker:
        trl_worker(a)
        return 0
    chosen = [a.only] if a.only else a.sides.split(",") if a.sides else None
    if chosen and not set(chosen) <= set(SIDES):
        p.error(f"--sides: each of {', '.join(SIDES)}, not {a.sides}")
    if not chosen or "trl" in chosen:
        missing = trl_missing()
        if missing:
            print(f"{missing}: pip install trl=={TRL_VERSION}", file=sys.stderr)
            return 2
    from rlvr.models.hub import resolve_model

    print(f"model: {resolve_model(a.model)}", flush=True)  # pulls it once, outside any timing
    sides = [side for side in SIDES if side in chosen] if chosen else list(SIDES)
    from rlvr.kit.device import cpu_has_bf16

    if not chosen and not cpu_has_bf16():
        sides.remove("rlvr-bf16")
        print("rlvr-bf16 left out: this CPU has no bf16 instructions (rlvr samples in fp32 here, the rlvr side)")
    work = Path(tempfile.mkdtemp(prefix="rlvr-bench-trl-"))
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    try:
        for rnd in range(a.rounds):
            for side in sides:
                print(f"round {rnd + 1}/{a.rounds}: {side} ...", end=" ", flush=True)
                folder = work / f"{side}-{rnd}"
                run = run_rlvr(a, folder, side) if side in RLVR_SIDES else run_trl(a, folder)
                runs[side].append(run)
                steps = run["step_s"]
                print(f"start-up {_fmt(run['startup_s'], '.1f')} s, steps {', '.join(f'{s:.1f}' for s in steps)} s, "
                      f"reward {', '.join(_fmt(x, '.2f', 'nan') for x in run['reward'])}, wall {run['wall_s']:.0f} s", flush=True)
                if side == "trl" and not run.get("prompt_tokens_match_rlvr", True):
                    print("warning: TRL's prompt tokens differ from rlvr's", flush=True)
    finally:
        if a.keep:
            print(f"runs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    summary = {side: summarize(rs, side) for side, rs in runs.items()}
    verdict = report(summary, a)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    config = {k: v for k, v in vars(a).items() if k not in ("_trl_worker", "out")}
    a.out.write_text(json.dumps({
        "config": {**config, "model": a.model, "task": TASK, "task_options": TASK_OPTIONS, "system": SYSTEM,
                   "template": TEMPLATE, "trl_version": TRL_VERSION, "rlvr_server_sampling": SERVER_SAMPLING,
                   "targets": {"time_ratio": TARGET_RATIO, "sync_fraction": TARGET_SYNC}},
        "summary": summary, "verdict": verdict, "runs": runs,
    }, indent=2, default=str))
    print(f"results: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
