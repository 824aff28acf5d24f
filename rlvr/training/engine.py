"""The RLOO training loop: rollout -> update -> sync -> log -> checkpoint/eval.

Run it with::

    rlvr train tasks/demo.yaml                                  # one process (CPU laptop or 1 GPU)
    deepspeed --no_local_rank --module --num_gpus 8 rlvr.cli train tasks/gsm8k.yaml   # 8 GPUs
    deepspeed --no_local_rank --module --hostfile hosts rlvr.cli train tasks/math.yaml # several nodes
    DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 -m rlvr.cli train tasks/demo.yaml  # 2 CPU ranks
    rlvr train tasks/demo.yaml --set sampling.mode=server --set sampling.max_staleness=1  # sampler apart, ahead

The parts, one job each: ``rlvr.training.rollout`` samples and scores this rank's prompts (groups never
straddle ranks; through ``rlvr.rewards.scored``, as evaluation does), ``rlvr.training.learner`` turns a
rollout into one policy update (leave-one-out advantages inside each group; DeepSpeed averages
gradients over ranks) and returns what it did (``Update``), ``rlvr.training.policy`` builds the model
and DeepSpeed, ``rlvr.sampling.samplers`` holds vLLM or transformers sampling and receives the new
weights after every step, ``rlvr.training.report`` writes each step's row, line and samples,
``rlvr.evaluation.held_out`` evaluates on the held-out split, ``rlvr.training.checkpoint`` saves and
resumes, ``rlvr.runs.logs`` decides what the terminal shows;
``rlvr.sampling.server`` runs the sampler in processes of its own (``sampling.mode: server``) and
``rlvr.training.rollout.Pipeline`` lets it run ahead (``sampling.max_staleness``).

Departures from the RLOO paper (Ahmadian et al. 2024): the baseline excludes unscorable
samples; PPO-style clipping, KL control and length shaping are options.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from rlvr import RlvrError
from rlvr.evaluation.compare import describe, percent
from rlvr.evaluation.held_out import Evaluator
from rlvr.host.registry import Registry
from rlvr.kit import write_replacing
from rlvr.kit.device import DevicePolicy, device_policy
from rlvr.models.distributed import environment_scope, init_default_group, process_group_scope
from rlvr.models.hub import load_tokenizer, local_folder, resolve_model
from rlvr.models.tokens import untrained_tokens_note
from rlvr.recipe.sampler_backends import SAMPLER_BACKENDS
from rlvr.recipe.spec import Recipe
from rlvr.rewards.runner import bind_rewards
from rlvr.runs.logs import RunOutput
from rlvr.runs.tracking import check_trackers
from rlvr.sampling.episodes import episode_runner
from rlvr.sampling.prompts import PromptSet, load_prompt_set
from rlvr.sampling.samplers import (backend_dtype, context_length, make_sampler, model_max_len, require_vllm,
                                   same_gpu_problem, trainer_gpus)
from rlvr.sampling.server import connect_samplers, run_evaluates, run_lengths
from rlvr.training.checkpoint import (TrainState, check_output_dir, drop_checkpoints, final_dtype, load_checkpoint,
                                     save_checkpoint, save_final, stop_requests)
from rlvr.training.learner import Learner, is_correction_mode
from rlvr.training.policy import build_policy, lr_multiplier, sync_weights, without_shm_inference_op
from rlvr.training.pool import prompt_source
from rlvr.training.report import StepReport
from rlvr.training.rollout import Pipeline, RolloutProducer

log = logging.getLogger("rlvr.training.engine")


def distributed_env() -> tuple[int, int, int]:
    """(rank, world size, local rank); a plain `rlvr train` is a world of one."""
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))


def check_shapes(recipe: Recipe, world: int) -> None:
    """Batch shapes that depend on the number of ranks (the rest is the recipe's): before any model loads."""
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


def train(recipe: Recipe, registry: Registry, output_dir: Path, resume: bool = False,
          verbose: bool = False) -> dict[str, Any]:
    """Train ``recipe``; the summary. The run takes down all it set up in this process, however it
    ends (its process group and DeepSpeed's hold on it in ``_train``, the variables it sets in
    ``os.environ`` here), so that another run may follow it in the same process."""
    with environment_scope():
        return _train(recipe, registry, output_dir, resume, verbose)


def _train(recipe: Recipe, registry: Registry, output_dir: Path, resume: bool, verbose: bool) -> dict[str, Any]:
    rank, world, local_rank = distributed_env()
    check_shapes(recipe, world)
    output_dir = Path(output_dir)
    ckpt_dir = output_dir / "checkpoints"
    check_output_dir(output_dir, resume)
    policy = device_policy()  # what differs on a GPU; what it cannot do is refused before any model loads
    problem = policy.dtype_problem(recipe.model.dtype) or same_gpu_problem(
        recipe, cuda=policy.cuda, world=world, trainer=trainer_gpus(int(os.environ.get("LOCAL_WORLD_SIZE", world)),
                                                                   os.environ.get("CUDA_VISIBLE_DEVICES")))
    if problem:
        raise RlvrError(problem)
    rewards = bind_rewards(recipe.rewards, registry, conversational=recipe.prompt.chat_template,
                           when_unscored=recipe.when_unscored, max_abs=recipe.max_abs_reward)
    trackers = check_trackers(recipe.trainer.report_to)  # one named but not installed: before any model loads
    t, s, algo = recipe.trainer, recipe.sampling, recipe.algorithm
    # However training ends, the sampler is closed (``closing``) and then the default process
    # group (DeepSpeed's; vLLM's engine uses it too) destroyed: nothing is left to the exit.
    with (RunOutput(output_dir, rank=rank, verbose=verbose, total_steps=t.steps) as out, process_group_scope(world),
          ExitStack() as closing):
        device, model_path = _start_ranks(recipe, rank, world, local_rank, policy)
        log.info(f"device: {policy.describe()}; trainer in {policy.trainer_dtype(recipe.model.dtype)}, weights in "
                 f"{policy.weights_dtype(recipe.model.dtype)}{', autocast' if policy.autocast(recipe.model.dtype) else ''}")
        slow = policy.emulated_bf16(recipe.model.dtype, recipe.sampling.dtype)
        if slow:
            log.warning(slow)
        tokenizer = load_tokenizer(model_path, recipe.model.name)
        train_set, eval_set = _prompt_sets(recipe, registry, tokenizer)
        backend, ref_model, zero_stage = build_policy(recipe, model_path, world=world, device=device, policy=policy)
        zero3, lora = zero_stage == 3, bool(recipe.model.lora)
        sampler = _sampler(recipe, model_path, train_set, eval_set, rank=rank, world=world, policy=policy,
                           output_dir=output_dir, get_model=lambda: backend.module, tokenizer=tokenizer,
                           synced=zero3 and world > 1)
        # vLLM's shutdown may tear down the default process group: nothing collective after it
        closing.callback(sampler.close)

        def sync(complete: bool = False) -> float:  # gathered (ZeRO-3) and sent sync_bucket_mb at a time
            # The sampler started from model_path: it holds the frozen weights (complete: it may not)
            return sync_weights(backend.module, sampler, lora=lora, zero3=zero3, bucket_bytes=s.sync_bucket_mb << 20,
                                complete=complete)

        state, position = TrainState(), 0
        report = StepReport(recipe, world, rank, out, tokenizer, trackers)
        closing.callback(report.trackers.close)
        if resume:
            state, position = load_checkpoint(backend.engine, ckpt_dir, rank=rank)
            report.truncate_to(state.step)
            log.info(f"resumed at step {state.step}")
        if resume or (s.mode == "server" and s.server.urls):
            sync(complete=True)  # a running sampler named in urls may hold another run's weights: never trust it
        stream = prompt_source(recipe, len(train_set.rows), rank, world, position, state.pool)  # data.pool or not
        is_mode, want_logprobs = _importance_sampling(recipe, policy)
        episodes = episode_runner(recipe, registry, tokenizer, model_path)
        producer = RolloutProducer(sampler, rewards, train_set, stream, groups=recipe.prompts_per_step // world,
                                   sampling=s, dynamic_sampling=algo.dynamic_sampling, seed=t.seed, rank=rank,
                                   logprobs=want_logprobs, episodes=episodes)
        pipeline = Pipeline(producer, sync, max_staleness=s.max_staleness, total_steps=t.steps, version=state.step)
        closing.callback(pipeline.close)  # its generation drawn ahead stops before the sampler closes
        learner = _learner(recipe, backend, ref_model=ref_model, is_mode=is_mode, pad_id=_pad_id(tokenizer),
                           device=device, policy=policy)
        evaluate = Evaluator(recipe, rewards, sampler, eval_set, rank, world, output_dir, pipeline.quiesce,
                             episodes) if eval_set else None
        if evaluate and resume:  # its evaluations are paired with the one before training, if kept
            evaluate.first = evaluate.kept_first()
        summary: dict[str, Any] = {"dropped_prompts": train_set.dropped}
        if t.eval_at_start and state.step == 0:
            summary["eval_before"] = evaluate("before", 0)

        stop = closing.enter_context(stop_requests(ckpt_dir))  # Ctrl-C, SIGTERM: after a step, with a checkpoint
        out.start_bar(state.step)
        while state.step < t.steps:
            step, step_start = state.step, time.perf_counter()
            rollout = pipeline.take(step)
            lr = t.lr * lr_multiplier(step, warmup=t.warmup_steps, total=t.steps, schedule=t.schedule)
            train_start = time.perf_counter()
            update = learner.update(rollout, lr)
            train_time = time.perf_counter() - train_start
            state.step += 1
            pipeline.publish(state.step)
            times = {"generate": rollout.time_generate, "score": rollout.time_score, "train": train_time,
                     **({"env": rollout.time_env} if rollout.episodes is not None else {}),
                     **pipeline.times, "step": time.perf_counter() - step_start}
            report(step, rollout, update, times, lr=backend.lr)  # the rate the optimizer really used
            stopping = stop.agreed()  # by every rank, at the same step
            if state.step % t.save_every == 0 or state.step == t.steps or stopping:
                save_checkpoint(backend.engine, ckpt_dir, state, rank=rank, data_position=rollout.stream_position,
                                keep_last=t.keep_last, pool=rollout.pool_state)
            if stopping:
                raise stop.stopped(state.step, t.steps)
            if t.eval_every and state.step % t.eval_every == 0 and state.step < t.steps:
                evaluate(f"step{state.step}", state.step)
        stop.release()  # from here on a signal stops at once: the last step's checkpoint is saved
        out.stop_bar()
        pipeline.close()

        if t.eval_at_end:
            summary["eval_after"] = evaluate("after", state.step)
        save_final(backend.engine, tokenizer, output_dir / "final", rank=rank, zero3=zero3, lora=lora,
                   dtype=final_dtype(t.final_dtype, recipe.model.name, model_path), base=recipe.model.name,
                   merged=t.save_merged)
        _finish(summary, output_dir, rank=rank, drop=t.final_checkpoint == "none")
        return summary


def _start_ranks(recipe: Recipe, rank: int, world: int, local_rank: int, policy: DevicePolicy):
    """This rank joined to the others (DeepSpeed on the default group), on its device, with the
    model pulled once and the run's seeds set: (device, the model's folder)."""
    import torch

    if not policy.cuda:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    import torch.distributed as dist

    init_default_group(policy.dist_backend(), rank, world)  # on loopback when the run keeps to this host
    if not policy.cuda:
        without_shm_inference_op()
    deepspeed.init_distributed(dist_backend=policy.dist_backend())  # adopts it
    device = policy.device(local_rank)
    policy.bind(device)
    if rank == 0:
        resolve_model(recipe.model.name)  # pulls an alias once, before the other ranks look
    dist.barrier()
    model_path = resolve_model(recipe.model.name, pull=False)
    if rank == 0 and recipe.environment:  # a hub id's files: its snapshot in the hub cache
        note = untrained_tokens_note(recipe.model.name, local_folder(recipe.model.name) or model_path)
        if note:
            log.warning(note)
    random.seed(recipe.trainer.seed + rank)
    torch.manual_seed(recipe.trainer.seed + rank)
    return device, model_path


def _prompt_sets(recipe: Recipe, registry: Registry, tokenizer) -> tuple[PromptSet, PromptSet | None]:
    """The train prompts, and the eval prompts when the run evaluates (what was dropped, logged)."""
    train_set = load_prompt_set(recipe, registry, tokenizer, split="train")
    eval_set = load_prompt_set(recipe, registry, tokenizer, split="eval") if run_evaluates(recipe) else None
    for name, kept in (("train", train_set), ("eval", eval_set)):
        if kept is not None and kept.dropped:
            log.info(f"{name}: dropped {kept.dropped} prompts over data.max_prompt_tokens; {len(kept.rows)} kept")
    return train_set, eval_set


def _sampler(recipe: Recipe, model_path: str, train_set: PromptSet, eval_set: PromptSet | None, *, rank: int,
             world: int, policy: DevicePolicy, output_dir: Path, get_model, tokenizer, synced: bool):
    """The run's sampler: vLLM servers in server mode, else one in this process (vLLM's or the
    trainer's own module through transformers)."""
    s, seed = recipe.sampling, recipe.trainer.seed
    longest, new_tokens = run_lengths(recipe, train_set, eval_set)
    eval_rows = len(eval_set.rows) if eval_set else 0  # the sampler's KV cache holds them (CPU)
    if s.mode == "server" and SAMPLER_BACKENDS[s.backend].serves:
        require_vllm()
        return connect_samplers(recipe, model_path, max_model_len=context_length(
            longest, new_tokens, model_max_len(model_path)), seed=seed, rank=rank, world=world,
            output_dir=output_dir, on_cpu=not policy.cuda, eval_rows=eval_rows)
    return make_sampler(recipe, model_path, longest_prompt=longest, max_new_tokens=new_tokens, seed=seed + rank,
                        world=world, eval_rows=eval_rows, get_model=get_model, tokenizer=tokenizer, synced=synced)


def _pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def _finish(summary: dict, output_dir: Path, *, rank: int, drop: bool) -> None:
    """After the final model is saved: the summary (rank 0) once every rank is done, and the
    checkpoints dropped when ``drop`` (``trainer.final_checkpoint: none``)."""
    import torch.distributed as dist

    if rank == 0:
        _write_summary(summary, output_dir)
    dist.barrier()
    if rank == 0 and drop:
        drop_checkpoints(output_dir / "checkpoints")


def _learner(recipe: Recipe, backend, *, ref_model, is_mode: str, pad_id: int, device,
             policy: DevicePolicy) -> Learner:
    t = recipe.trainer
    overhead = t.micro_batch_overhead_tokens
    return Learner(backend, recipe.algorithm, micro_batch_size=t.micro_batch_size,
                   temperature=recipe.sampling.temperature, pad_id=pad_id, device=device, ref_model=ref_model,
                   is_mode=is_mode, skip_zero_advantage=t.skip_zero_advantage,
                   logprob_chunk_tokens=t.logprob_chunk_tokens,
                   cpu_autocast=policy.autocast(recipe.model.dtype),
                   micro_batch_tokens=t.micro_batch_tokens,
                   micro_batch_overhead=policy.micro_batch_overhead if overhead is None else overhead,
                   # transformers drops the key/value cache that prompt sharing needs under checkpointing
                   share_prompts=t.share_prompts and not recipe.model.gradient_checkpointing)


def _importance_sampling(recipe: Recipe, policy: DevicePolicy) -> tuple[str, bool]:
    """(correction mode, whether to ask the sampler for log-probs). Where a backend's log-probs
    cost nothing extra (vLLM's) they are always taken, and the sampler-trainer mismatch is
    measured whatever the mode; the sampler's dtype follows its backend's rule (``backend_dtype``)."""
    s = recipe.sampling
    trainer = policy.trainer_dtype(recipe.model.dtype)
    sampler = backend_dtype(recipe, policy)
    mode = is_correction_mode(recipe.algorithm.is_correction.mode, sampler_dtype=sampler, trainer_dtype=trainer,
                              max_staleness=s.max_staleness)
    return mode, mode != "none" or SAMPLER_BACKENDS[s.backend].free_logprobs


def _write_summary(summary: dict, output_dir: Path) -> None:
    change = summary.get("eval_after", {}).get("change_from_before")
    if "eval_after" in summary and ("eval_before" in summary or change):
        # a resumed run did not evaluate "before" itself: the pairing has its accuracy
        before = summary["eval_before"]["accuracy"] if "eval_before" in summary else change["before"]
        after = summary["eval_after"]["accuracy"]
        log.info(f"held-out accuracy: {percent(before)} -> {percent(after)} ({100 * (after - before):+.1f} points)"
                 + (f"; {describe(change)}" if change else ""))
    try:
        from rlvr.runs.plotting import plot_metrics

        summary["plot"] = str(plot_metrics(output_dir))
        log.info(f"curves: {summary['plot']}")
    except Exception as exc:  # noqa: BLE001 - a plot must not fail a finished run
        log.warning(f"could not plot: {exc}")
    write_replacing(output_dir / "summary.json", json.dumps(summary, indent=2, default=str))
