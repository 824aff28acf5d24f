"""The RLOO training loop: sample -> score -> advantages -> loss -> step -> sync -> log -> checkpoint.

Run it with::

    rlvr train tasks/demo.yaml                                  # one process (CPU laptop or 1 GPU)
    deepspeed --num_gpus 8 -m rlvr.cli train tasks/gsm8k.yaml  # 8 GPUs, one node
    deepspeed --hostfile hosts -m rlvr.cli train tasks/math.yaml # several nodes
    DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 -m rlvr.cli train tasks/demo.yaml  # 2 CPU ranks

Every rank samples its own share of the step's prompts with its own sampler, scores them,
computes leave-one-out advantages inside each prompt's group (groups never straddle ranks),
and trains; DeepSpeed averages gradients. After each optimizer step every rank pushes the new
weights into its sampler (under ZeRO-3, gathered a few tensors at a time).

Departures from the RLOO paper (Ahmadian et al. 2024): the baseline excludes unscorable
samples; PPO-style clipping, KL control and length shaping are options.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import RlvrError
from .algo import rloo_advantages, shortest_correct_penalty
from .models import resolve_model
from .plugins import Registry
from .recipe import Recipe, data_dir
from .rewards import bind_rewards, score_batch

log = logging.getLogger("rlvr.engine")


# ---------------------------------------------------------------------------- process helpers
def _distributed_env() -> tuple[int, int, int]:
    """(rank, world size, local rank); a plain `rlvr train` is a world of one."""
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))


def check_shapes(recipe: Recipe, world: int) -> None:
    """Batch shapes that depend on the number of ranks: fail before any model loads."""
    per_rank_prompts, rest = divmod(recipe.prompts_per_step, world)
    if rest or per_rank_prompts == 0:
        raise RlvrError(
            f"{recipe.prompts_per_step} prompts a step (trainer.rollout_batch_size / sampling.num_generations) "
            f"do not split over {world} ranks"
        )
    per_rank = recipe.trainer.rollout_batch_size // world
    if per_rank % recipe.trainer.micro_batch_size:
        raise RlvrError(
            f"trainer.micro_batch_size ({recipe.trainer.micro_batch_size}) must divide the "
            f"{per_rank} completions each of {world} ranks trains on a step"
        )
    if recipe.model.lora and recipe.trainer.zero_stage == 3:
        raise RlvrError("model.lora with trainer.zero_stage 3 is not supported: use stage 0-2 for LoRA")


def render_prompt(tokenizer, prompt_cfg, row: dict) -> list[int]:
    """Prompt token ids: system and template are str.format-ed over the row's columns."""
    user = prompt_cfg.template.format(**row)
    system = prompt_cfg.system.format(**row) if prompt_cfg.system else None
    if not prompt_cfg.chat_template or tokenizer.chat_template is None:
        text = (system + "\n\n" if system else "") + user
        return tokenizer(text, add_special_tokens=True)["input_ids"]
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user}
    ]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


class PromptStream:
    """Epoch-wise shuffled prompt indices; ``position`` is checkpointed for exact resume."""

    def __init__(self, size: int, seed: int, position: int = 0):
        self.size, self.seed, self.position = size, seed, position

    def take(self, count: int) -> list[int]:
        out = []
        for _ in range(count):
            epoch, offset = divmod(self.position, self.size)
            order = list(range(self.size))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            out.append(order[offset])
            self.position += 1
        return out


# ---------------------------------------------------------------------------- metrics and checkpoints
class MetricsLog:
    """metrics.jsonl: exactly one row per step, also across kill -9 and --resume."""

    def __init__(self, path: Path, enabled: bool):
        self.path, self.enabled = path, enabled
        self.tb = None

    def truncate_to(self, next_step: int) -> None:
        """Keep rows of steps before ``next_step`` (a resumed run redoes the rest)."""
        if not self.enabled or not self.path.exists():
            return
        keep = []
        for line in self.path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a row cut short by a kill
            if isinstance(row, dict) and row.get("step", math.inf) < next_step:
                keep.append(line)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        os.replace(tmp, self.path)

    def write(self, row: dict) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self.tb is None:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(self.path.parent / "tensorboard"))
            except Exception:  # noqa: BLE001 - tensorboard is a convenience
                self.tb = False
        if self.tb:
            for key, value in row.items():
                if isinstance(value, (int, float)) and key != "step":
                    self.tb.add_scalar(key, value, row["step"])
            self.tb.flush()


@dataclass
class TrainState:
    step: int = 0  # the next step to run
    data_position: int = 0


# ---------------------------------------------------------------------------- the loop
def train(recipe: Recipe, registry: Registry, output_dir: Path, resume: bool = False) -> dict[str, Any]:
    rank, world, local_rank = _distributed_env()
    check_shapes(recipe, world)
    output_dir = Path(output_dir)
    ckpt_dir = output_dir / "checkpoints"
    if not resume and (ckpt_dir / "latest").exists():
        raise RlvrError(f"{output_dir} already holds a run: pass --resume to continue it, or choose another --output-dir")
    if resume and not (ckpt_dir / "latest").exists():
        raise RlvrError(f"--resume: no checkpoint in {ckpt_dir}")
    rewards = bind_rewards(recipe.rewards, registry)
    task = registry.task(recipe.task.name)
    rows = list(task.load(recipe.data.train_split, data_dir=data_dir(), **recipe.task.options))
    if recipe.data.train_limit:
        rows = rows[: recipe.data.train_limit]
    if not rows:
        raise RlvrError(f"task {task.name!r} split {recipe.data.train_split!r} has no rows")

    import torch

    cuda = torch.cuda.is_available()
    if not cuda:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .forward import completion_logits, plan_micro_batches
    from .losses import aggregate, kl_estimate, policy_loss, token_logprobs_and_entropy
    from .sampling import HFSampler, VLLMSampler, hf_state_for_sync

    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING, format="%(message)s")
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    import torch.distributed as dist

    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    if rank == 0:
        output_dir.mkdir(parents=True, exist_ok=True)
        model_path = resolve_model(recipe.model.name)
    dist.barrier()
    model_path = resolve_model(recipe.model.name, pull=False)
    random.seed(recipe.trainer.seed + rank)
    torch.manual_seed(recipe.trainer.seed + rank)

    bf16 = recipe.model.dtype == "bfloat16" or (recipe.model.dtype == "auto" and cuda and torch.cuda.is_bf16_supported())
    fp16 = recipe.model.dtype == "float16"
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    # Gradient checkpointing makes transformers drop the key/value cache that prompt sharing needs.
    share_prompts = recipe.trainer.share_prompts and not recipe.model.gradient_checkpointing
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.config.use_cache = False
    if recipe.model.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if recipe.model.lora:
        from peft import LoraConfig, get_peft_model

        lc = recipe.model.lora
        model = get_peft_model(model, LoraConfig(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout,
                                                 target_modules=lc.target_modules, task_type="CAUSAL_LM"))
    kl_cfg = recipe.algorithm.kl
    ref_model = None
    if kl_cfg.beta > 0 and not recipe.model.lora:  # with LoRA the reference is the adapter-free base
        ref_model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        ref_model.config.use_cache = False

    t = recipe.trainer
    per_rank = t.rollout_batch_size // world
    grad_accum = per_rank // t.micro_batch_size
    # On one rank ZeRO partitions nothing: without offload, stage 0 does the same maths without
    # ZeRO's gradient-bucket copies (and 0.7 GiB less memory in benchmarks/bench_trl.py).
    zero_stage = t.zero_stage if world > 1 or t.offload_optimizer or t.offload_params else 0
    if zero_stage != t.zero_stage:
        log.info("one rank, no offload: running DeepSpeed ZeRO stage 0 (trainer.zero_stage %d partitions nothing)", t.zero_stage)
    ds_config: dict[str, Any] = {
        "train_batch_size": t.rollout_batch_size,
        "train_micro_batch_size_per_gpu": t.micro_batch_size,
        "gradient_accumulation_steps": grad_accum,
        "gradient_clipping": t.max_grad_norm,
        "zero_optimization": {"stage": zero_stage},
        "bf16": {"enabled": bf16},
        "fp16": {"enabled": fp16},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if t.offload_optimizer:
        ds_config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    if t.offload_params:
        ds_config["zero_optimization"]["offload_param"] = {"device": "cpu"}
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = None
    if t.offload_optimizer:
        ds_config["optimizer"] = {"type": "AdamW", "params": {"lr": t.lr, "weight_decay": t.weight_decay}}
    else:
        # fused: one kernel over all tensors (CPU and GPU); 0.11-0.15 s vs 0.65 s a step for
        # SmolLM2's 135M parameters on our CPU. TRL's default optimizer is the fused one too.
        optimizer = torch.optim.AdamW(params, lr=t.lr, weight_decay=t.weight_decay, fused=True)

    def lr_lambda(step: int) -> float:
        if t.warmup_steps and step < t.warmup_steps:
            return (step + 1) / t.warmup_steps
        progress = (step - t.warmup_steps) / max(1, t.steps - t.warmup_steps)
        if t.schedule == "linear":
            return max(0.0, 1.0 - progress)
        if t.schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return 1.0

    def make_scheduler(opt):
        return torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)

    engine, _, _, scheduler = deepspeed.initialize(
        model=model, model_parameters=params, optimizer=optimizer, lr_scheduler=make_scheduler, config=ds_config
    )
    if ref_model is not None:
        if zero_stage == 3:
            ref_model, *_ = deepspeed.initialize(model=ref_model, config={**ds_config, "zero_optimization": {"stage": 3}})
        else:
            ref_model = ref_model.to(device=device, dtype=torch.bfloat16 if bf16 else torch.float32)
        ref_model.eval()

    zero3 = zero_stage == 3
    s = recipe.sampling
    prompt_ids_all: dict[int, list[int]] = {}

    def prompt_ids(index: int) -> list[int]:
        if index not in prompt_ids_all:
            prompt_ids_all[index] = render_prompt(tokenizer, recipe.prompt, rows[index])
        return prompt_ids_all[index]

    max_prompt = max(len(prompt_ids(i)) for i in range(min(len(rows), 256)))
    if s.backend == "vllm":
        try:
            sampler = VLLMSampler(
                model_path, max_model_len=max(2 * max_prompt, max_prompt + 64) + max(s.max_tokens, recipe.eval.max_tokens or 0),
                seed=t.seed + rank, gpu_memory_utilization=s.gpu_memory_utilization,
                cpu_kvcache_gib=s.cpu_kvcache_gib, in_process=world == 1, on_cpu=not cuda, dtype=s.dtype,
            )
        except ImportError as exc:
            raise RlvrError(f"sampling.backend vllm needs vLLM ({exc}); install rlvr[cpu] or rlvr[gpu], or set sampling.backend=hf") from None
    else:
        sampler = HFSampler(lambda: engine.module, tokenizer, synced=zero3 and world > 1)

    def sync_weights() -> float:
        start = time.perf_counter()
        module = engine.module
        merged = bool(recipe.model.lora)
        if merged:
            module.merge_adapter()
        with torch.no_grad():
            sampler.load_weights(hf_state_for_sync(module, zero3))
        if merged:
            module.unmerge_adapter()
        return time.perf_counter() - start

    state = TrainState()
    metrics = MetricsLog(output_dir / "metrics.jsonl", enabled=rank == 0)
    if resume:
        _, client = engine.load_checkpoint(str(ckpt_dir))
        state = TrainState(**client["train_state"])
        rng = torch.load(Path(ckpt_dir) / f"step{state.step}" / f"rng_rank{rank}.pt", weights_only=False)
        random.setstate(rng["python"])
        torch.set_rng_state(rng["torch"])
        metrics.truncate_to(state.step)
        sync_weights()
        log.info(f"resumed at step {state.step}")
    stream = PromptStream(len(rows), recipe.data.seed, state.data_position)
    algo = recipe.algorithm
    k = s.num_generations
    prompts_per_rank = recipe.prompts_per_step // world
    eval_rows = None

    def run_eval(tag: str) -> dict:
        nonlocal eval_rows
        from .evaluate import evaluate_with

        result = evaluate_with(recipe, registry, sampler, tokenizer, rank=rank, world=world, rows=eval_rows)
        eval_rows = result.pop("_rows")
        result.pop("_per_prompt")
        if rank == 0:
            row = {"tag": tag, "step": state.step, **result}
            with open(output_dir / "eval.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            log.info(f"eval ({tag}, step {state.step}): accuracy {result['accuracy']:.3f} on {result['n']} prompts")
        return result

    summary: dict[str, Any] = {}
    if t.eval_at_start and state.step == 0:
        summary["eval_before"] = run_eval("before")

    progress = _progress(rank == 0, t.steps, state.step)
    while state.step < t.steps:
        step = state.step
        step_start = time.perf_counter()
        # ---- sample: every rank takes its share of this step's prompts
        chosen = stream.take(recipe.prompts_per_step)
        mine = chosen[rank * prompts_per_rank : (rank + 1) * prompts_per_rank]
        groups, rounds = [], 0
        t_gen = t_score = 0.0
        rewards_all: list[float | None] = []
        per_reward: dict[str, list] = {}
        errors = 0
        kept_zero_var = 0
        while True:
            rounds += 1
            t0 = time.perf_counter()
            outs = sampler.generate([prompt_ids(i) for i in mine], n=k, temperature=s.temperature, top_p=s.top_p,
                                    max_tokens=s.max_tokens, seed=t.seed * 1_000_003 + step * 1_009 + rounds * 101 + rank)
            t1 = time.perf_counter()
            flat_rows = [rows[i] for i in mine for _ in range(k)]
            flat_prompts = [tokenizer.decode(prompt_ids(i), skip_special_tokens=False) for i in mine for _ in range(k)]
            flat = [c for group in outs for c in group]
            scored = score_batch(rewards, flat_prompts, [c.text for c in flat], [c.token_ids for c in flat], flat_rows)
            t_gen, t_score = t_gen + t1 - t0, t_score + time.perf_counter() - t1
            errors += sum(scored.errors.values())
            for gi, idx in enumerate(mine):
                g_rewards = scored.total[gi * k : (gi + 1) * k]
                values = [r for r in g_rewards if r is not None]
                zero_var = len(values) >= 2 and max(values) == min(values)
                if algo.dynamic_sampling.enabled and zero_var and rounds < algo.dynamic_sampling.max_rounds:
                    continue
                if len(groups) >= prompts_per_rank:
                    break
                kept_zero_var += zero_var
                groups.append((idx, prompt_ids(idx), flat[gi * k : (gi + 1) * k]))
                rewards_all.extend(g_rewards)
                for name in scored.names:
                    per_reward.setdefault(name, []).extend(scored.values[name][gi * k : (gi + 1) * k])
            if len(groups) >= prompts_per_rank or not algo.dynamic_sampling.enabled:
                break
            mine = stream.take(prompts_per_rank - len(groups)) if world == 1 else [random.randrange(len(rows)) for _ in range(prompts_per_rank - len(groups))]
        # ---- sequences for training
        completions = [c for _, _, cs in groups for c in cs]
        seq_prompts = [p for _, p, cs in groups for _ in cs]
        n_seq = len(completions)
        lengths = [len(c.token_ids) for c in completions]
        truncated = [c.truncated for c in completions]
        rewards_for_adv = list(rewards_all)
        if algo.length_penalty is not None:
            correct = [r is not None and r >= algo.length_penalty.correct_threshold for r in rewards_all]
            pen = shortest_correct_penalty(lengths, correct, k, algo.length_penalty.weight)
            rewards_for_adv = [None if r is None else r + p for r, p in zip(rewards_for_adv, pen)]

        # Loss normalisers are global, so the micro-batch plan changes no gradient; it is fixed
        # for the step because old and reference log-probs are keyed by it.
        plan = plan_micro_batches([len(p) for p in seq_prompts], lengths, k, t.micro_batch_size, share_prompts)

        def forward(module, idx, want_entropy=False):
            logits, targets, resp_mask = completion_logits(
                module, [seq_prompts[i] for i in idx], [completions[i].token_ids for i in idx],
                pad_id=pad_id, device=device, share_prompts=share_prompts,
            )
            logp, ent = token_logprobs_and_entropy(logits, targets, want_entropy)
            return logp, resp_mask.float(), ent

        # ---- old and reference log-probs (no grad)
        t_train0 = time.perf_counter()
        old_logps, ref_logps, kl_seq = {}, {}, [0.0] * n_seq
        need_old = algo.ppo_epochs > 1
        kl_in_reward = kl_cfg.beta > 0 and kl_cfg.target == "reward"
        with torch.no_grad():
            for idx in plan:
                if need_old or kl_in_reward:
                    lp, mask, _ = forward(engine, idx)
                if need_old:
                    old_logps[idx[0]] = lp
                if kl_cfg.beta > 0:
                    if ref_model is None:
                        with engine.module.disable_adapter():
                            ref_logps[idx[0]] = forward(engine, idx)[0]
                    else:
                        ref_logps[idx[0]] = forward(ref_model, idx)[0]
                    if kl_in_reward:
                        kl_tok = kl_estimate(lp, ref_logps[idx[0]], kl_cfg.estimator)
                        for j, i in enumerate(idx):
                            kl_seq[i] = float((kl_tok[j] * mask[j]).sum())
        if kl_in_reward:
            rewards_for_adv = [None if r is None else r - kl_cfg.beta * kl for r, kl in zip(rewards_for_adv, kl_seq)]
        advantages, adv_mask, gstats = rloo_advantages(rewards_for_adv, k, algo.normalize_advantages)
        seq_weight = [float(m) for m in adv_mask]
        if algo.mask_truncated:
            seq_weight = [0.0 if tr else w for w, tr in zip(seq_weight, truncated)]
        # global normalisers so micro-batch losses add up to the batch mean across ranks
        local_tokens = sum(len(c.token_ids) * w for c, w in zip(completions, seq_weight))
        local_seqs = sum(seq_weight)
        norm = torch.tensor([local_tokens, local_seqs], dtype=torch.float64)
        dist.all_reduce(norm)
        num_tokens, num_seqs = float(norm[0]), float(norm[1])
        # DeepSpeed divides by gradient accumulation steps and averages over ranks: undo both.
        scale = grad_accum * world
        clip = (algo.clip.eps_low, algo.clip.eps_high) if algo.clip else None
        sums = {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_low": 0.0, "clip_high": 0.0, "tokens": 0.0}
        grad_norm = own_norm = 0.0
        for epoch in range(algo.ppo_epochs):
            for idx in plan:
                logp, resp_mask, ent = forward(engine, idx, want_entropy=epoch == 0)
                mask = resp_mask * torch.tensor([seq_weight[i] for i in idx], device=device).unsqueeze(-1)
                old = old_logps[idx[0]] if need_old else logp.detach()
                adv = torch.tensor([advantages[i] for i in idx], device=device, dtype=torch.float32)
                tok_loss, c_low, c_high = policy_loss(logp, old, adv, clip)
                if kl_cfg.beta > 0:
                    kl_tok = kl_estimate(logp, ref_logps[idx[0]], kl_cfg.estimator)
                    if kl_cfg.target == "loss":
                        tok_loss = tok_loss + kl_cfg.beta * kl_tok
                    if epoch == 0:
                        sums["kl"] += float((kl_tok.detach() * resp_mask).sum())
                loss = aggregate(tok_loss, mask, algo.loss_aggregation, num_tokens, num_seqs)
                engine.backward(loss * scale)
                if zero_stage == 0 and not (bf16 or fp16) and engine.is_gradient_accumulation_boundary():
                    # DeepSpeed reports no norm for plain fp32 stage 0; gradients are whole here
                    own_norm = float(torch.nn.utils.get_total_norm([q.grad for q in params if q.grad is not None]))
                engine.step()
                if epoch == 0:
                    sums["loss"] += float(loss.detach())
                    sums["entropy"] += float((ent * resp_mask).sum())
                    sums["clip_low"] += float((c_low.float() * mask).sum())
                    sums["clip_high"] += float((c_high.float() * mask).sum())
                    sums["tokens"] += float(resp_mask.sum())
            ds_norm = engine.get_global_grad_norm()
            grad_norm = float(ds_norm) if ds_norm is not None else own_norm
        t_train = time.perf_counter() - t_train0
        t_sync = sync_weights()
        state.step += 1
        state.data_position = stream.position
        # ---- metrics (summed over ranks)
        stat_keys = ["loss", "kl", "entropy", "clip_low", "clip_high", "tokens"]
        local = [sums[key] for key in stat_keys] + [
            sum(r for r in rewards_all if r is not None), sum(r * r for r in rewards_all if r is not None),
            sum(r is not None for r in rewards_all), gstats.groups, gstats.zero_variance, gstats.too_few_scorable,
            gstats.unscorable, errors, sum(lengths), max(lengths, default=0), sum(truncated), n_seq, rounds,
        ]
        for reward in rewards:
            vals = [v for v in per_reward.get(reward.name, []) if v is not None]
            local += [sum(vals), len(vals)]
        tensor = torch.tensor(local, dtype=torch.float64)
        max_len = torch.tensor([max(lengths, default=0)], dtype=torch.float64)
        dist.all_reduce(tensor)
        dist.all_reduce(max_len, op=dist.ReduceOp.MAX)
        v = tensor.tolist()
        (loss_s, kl_s, ent_s, cl_s, ch_s, tok_s, r_sum, r_sq, r_n, n_groups, zv, few, unscorable, errs,
         len_sum, _, trunc, seqs, rounds_s) = v[:19]
        step_time = time.perf_counter() - step_start
        mean = r_sum / r_n if r_n else float("nan")
        row = {
            "step": step,
            "reward_mean": mean,
            "reward_std": math.sqrt(max(0.0, r_sq / r_n - mean * mean)) if r_n else float("nan"),
            "zero_variance_frac": zv / n_groups if n_groups else 0.0,
            "too_few_scorable_groups": int(few),
            "unscorable": int(unscorable),
            "reward_errors": int(errs),
            "loss": loss_s,
            "kl": kl_s / tok_s if tok_s else 0.0,
            "clip_low_frac": cl_s / tok_s if tok_s else 0.0,
            "clip_high_frac": ch_s / tok_s if tok_s else 0.0,
            "entropy": ent_s / tok_s if tok_s else 0.0,
            "completion_len_mean": len_sum / seqs if seqs else 0.0,
            "completion_len_max": int(max_len.item()),
            "truncated_frac": trunc / seqs if seqs else 0.0,
            "grad_norm": grad_norm,
            "lr": scheduler.get_last_lr()[0] if scheduler is not None else t.lr,
            "time_generate": t_gen,
            "time_score": t_score,
            "time_train": t_train,
            "time_sync": t_sync,
            "time_step": step_time,
            "tokens_per_s": len_sum / t_gen if t_gen else 0.0,
            "sampling_rounds": rounds_s / world,
        }
        for j, r in enumerate(rewards):
            total, count = v[19 + 2 * j], v[20 + 2 * j]
            row[f"reward/{r.name}"] = total / count if count else float("nan")
        metrics.write(row)
        progress(row)
        # ---- checkpoint
        if state.step % t.save_every == 0 or state.step == t.steps:
            _save_checkpoint(engine, ckpt_dir, state, rank, t.keep_last, dist)
        if t.eval_every and state.step % t.eval_every == 0 and state.step < t.steps:
            run_eval(f"step{state.step}")
    progress(None)
    if t.eval_at_end:
        summary["eval_after"] = run_eval("after")
    _save_final(engine, tokenizer, output_dir / "final", rank, zero3, recipe)
    if rank == 0:
        if "eval_before" in summary and "eval_after" in summary:
            before, after = summary["eval_before"]["accuracy"], summary["eval_after"]["accuracy"]
            log.info(f"held-out accuracy: {before:.3f} -> {after:.3f} ({100 * (after - before):+.1f} points)")
        try:
            from .plotting import plot_metrics

            summary["plot"] = str(plot_metrics(output_dir))
            log.info(f"curves: {summary['plot']}")
        except Exception as exc:  # noqa: BLE001 - a plot must not fail a finished run
            log.warning(f"could not plot: {exc}")
        (output_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    dist.barrier()
    sampler.close()  # vLLM's shutdown may tear down the default process group: nothing collective after it
    return summary


def _save_checkpoint(engine, ckpt_dir: Path, state: TrainState, rank: int, keep_last: int, dist) -> None:
    import torch

    tag = f"step{state.step}"
    folder = ckpt_dir / tag
    # DeepSpeed writes `latest` after the weights and optimizer: a kill mid-save keeps the old one.
    # The RNG files go first so a checkpoint that `latest` names always has them.
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"python": random.getstate(), "torch": torch.get_rng_state()}, folder / f"rng_rank{rank}.pt")
    dist.barrier()
    engine.save_checkpoint(str(ckpt_dir), tag=tag, client_state={"train_state": state.__dict__.copy()})
    dist.barrier()
    if rank == 0:
        tags = sorted((p for p in ckpt_dir.glob("step*") if p.is_dir()), key=lambda p: int(p.name[4:]))
        for old in tags[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)


def _save_final(engine, tokenizer, folder: Path, rank: int, zero3: bool, recipe: Recipe) -> None:
    """A plain transformers folder that `rlvr eval --model` (and vLLM) can load."""
    module = engine.module
    if recipe.model.lora:
        module = module.merge_and_unload()
    if zero3:
        state = engine._zero3_consolidated_16bit_state_dict()  # noqa: SLF001 - DeepSpeed's documented way
    else:
        state = module.state_dict()
    if rank == 0:
        module.save_pretrained(folder, state_dict=state)
        tokenizer.save_pretrained(folder)


def _progress(enabled: bool, total: int, start: int):
    if not enabled:
        return lambda row: None
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    bar = Progress(TextColumn("[bold]step {task.completed}/{task.total}"), BarColumn(), TextColumn("{task.description}"),
                   TimeElapsedColumn(), TimeRemainingColumn())
    task_id = bar.add_task("", total=total, completed=start)
    bar.start()

    def update(row):
        if row is None:
            bar.stop()
            return
        bar.update(task_id, advance=1, description=(
            f"reward {row['reward_mean']:.3f}  len {row['completion_len_mean']:.0f}  "
            f"zero-var {row['zero_variance_frac']:.2f}  {row['time_step']:.1f}s/step"))
        bar.console.log(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}))

    return update
