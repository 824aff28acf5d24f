"""The policy being trained: the model (with LoRA when asked), its KL reference, DeepSpeed as the
optimizer side (``DeepSpeedBackend``), and its weights as a sampler takes them
(``exported_weights``: ZeRO-3 gathers, LoRA merge, Hugging Face names; ``sync_weights`` pushes
them). The DeepSpeed config and the learning-rate schedule are pure functions of the recipe.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

log = logging.getLogger("rlvr.training.policy")


def lr_multiplier(step: int, *, warmup: int, total: int, schedule: str) -> float:
    """The learning rate of training step ``step`` (0-based) as a fraction of ``trainer.lr``:
    linear warmup over ``warmup`` steps, then constant, linear or cosine decay to 0 at ``total``.
    One value per training step, however many optimizer steps (PPO epochs) the step takes."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    if schedule == "linear":
        return max(0.0, 1.0 - progress)
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    if schedule == "constant":
        return 1.0
    raise ValueError(f"unknown schedule {schedule!r}")


def effective_zero_stage(trainer, world: int) -> int:
    """On one rank without offload ZeRO partitions nothing: stage 0 does the same maths without
    ZeRO's gradient-bucket copies (0.7 GiB less memory in benchmarks/bench_trl.py)."""
    return trainer.zero_stage if world > 1 or trainer.offload_optimizer or trainer.offload_params else 0


def deepspeed_config(trainer, *, world: int, zero_stage: int, bf16: bool, fp16: bool) -> dict[str, Any]:
    """DeepSpeed's config for a recipe's ``trainer`` section on ``world`` ranks."""
    per_rank = trainer.rollout_batch_size // world
    zero: dict[str, Any] = {"stage": zero_stage}
    if trainer.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    if trainer.offload_params:
        zero["offload_param"] = {"device": "cpu"}
    config = {
        "train_batch_size": trainer.rollout_batch_size,
        "train_micro_batch_size_per_gpu": trainer.micro_batch_size,
        "gradient_accumulation_steps": per_rank // trainer.micro_batch_size,
        "gradient_clipping": trainer.max_grad_norm,
        "zero_optimization": zero,
        "bf16": {"enabled": bf16},
        "fp16": {"enabled": fp16},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if trainer.offload_optimizer:  # DeepSpeed's CPU Adam; otherwise we hand it torch's fused AdamW
        config["optimizer"] = {"type": "AdamW", "params": {"lr": trainer.lr, "weight_decay": trainer.weight_decay}}
    return config


def without_shm_inference_op() -> None:
    """Keep DeepSpeed from compiling its shared-memory all-reduce for CPU ranks
    (``deepspeed_shm_comm``: 67 s on 2 cores the first time, and again for each new Python
    environment, since the build's key holds its paths). Its process group builds it on start
    for ``inference_all_reduce`` alone, which only tensor-parallel inference calls; ZeRO's
    collectives are torch.distributed's, and ``inference_all_reduce`` without it is the process
    group's ``all_reduce``. For the DeepSpeed versions that build it so (``build_shm_op``); a
    version without that function is left as it is."""
    from importlib import import_module

    backend = import_module("deepspeed.comm.torch")  # `import ... as` would give torch: deepspeed.comm re-exports it
    if hasattr(backend, "build_shm_op"):
        backend.build_shm_op = _no_shm_op


def _no_shm_op():
    return None


def say_first_build(extension: str, what: str) -> None:
    """DeepSpeed compiles some of its C++ extensions the first time a run needs them, silently
    (its CPU Adam: 109 s on 2 cores): say so, so that a first run does not look hung."""
    from torch.utils.cpp_extension import _get_build_directory

    folder = Path(_get_build_directory(extension, verbose=False))
    if not any(folder.glob(f"{extension}*.so")):
        log.info(f"DeepSpeed builds {what} ({extension}) once, into {folder}: about two minutes on 2 cores; "
                 "later runs load it")


class DeepSpeedBackend:
    """The ``rlvr.training.learner.Backend`` of ``rlvr train``: a DeepSpeed engine.

    DeepSpeed divides each backward by the accumulation steps and averages gradients over
    ranks; the learner's losses are already shares of the global batch mean, so ``backward``
    undoes both. Every rank runs the same number of micro-batches in a step (the learner sees
    to it), so DeepSpeed's collectives stay aligned whatever each rank skipped. The learning rate is set on the optimizer's groups once per training step
    (DeepSpeed runs no scheduler: it would advance once per PPO epoch).
    """

    def __init__(self, engine, *, world: int, own_grad_norm: bool):
        self.engine, self.policy, self.module = engine, engine, engine.module
        self.scale = engine.gradient_accumulation_steps() * world
        self.own_grad_norm = own_grad_norm  # DeepSpeed reports no norm for plain fp32 stage 0
        self._pending = False  # the last micro-batch's gradient is in, the update is not

    def backward(self, loss, *, last: bool) -> None:
        # The learner decides how many micro-batches a step has (sequences without gradient are
        # not forwarded), so the accumulation boundary is set here, not counted by DeepSpeed;
        # the scale undoes DeepSpeed's division by its configured accumulation steps either way.
        if self._pending:
            raise RuntimeError("a micro-batch after the last one of an optimizer step")
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss * self.scale)
        self._pending = last

    def step(self) -> float:
        import torch

        if not self._pending:
            raise RuntimeError("optimizer step before the last micro-batch of the accumulation")
        self._pending = False
        norm = None
        if self.own_grad_norm:
            grads = [p.grad for p in self.module.parameters() if p.grad is not None]
            norm = float(torch.nn.utils.get_total_norm(grads))
        self.engine.step()
        reported = self.engine.get_global_grad_norm()
        return float(reported) if reported is not None else (norm or 0.0)

    def set_lr(self, lr: float) -> None:
        for group in self.engine.optimizer.param_groups:
            group["lr"] = lr

    @property
    def lr(self) -> float:
        return self.engine.optimizer.param_groups[0]["lr"]


def build_optimizer(trainer, params):
    """The optimizer ``trainer.optimizer`` names over ``params`` (DeepSpeed's CPU Adam stands in
    for it under ``trainer.offload_optimizer``)."""
    import torch

    if trainer.optimizer == "adamw_8bit":
        from rlvr.training.optim import AdamW8bit

        return AdamW8bit(params, lr=trainer.lr, weight_decay=trainer.weight_decay, seed=trainer.seed)
    # fused: one kernel over all tensors (CPU and GPU); 0.11-0.15 s vs 0.65 s a step for
    # SmolLM2's 135M parameters on our CPU. TRL's default optimizer is the fused one too.
    return torch.optim.AdamW(params, lr=trainer.lr, weight_decay=trainer.weight_decay, fused=True)


def frozen_base_bf16(recipe, policy, zero_stage: int) -> bool:
    """Whether a LoRA trainer holds its frozen base in bfloat16 (``rlvr.models.lora.hold_frozen_linears``):
    where it computes under bfloat16 autocast on a CPU (``DevicePolicy.autocast``), its weights
    whole on each rank (not ZeRO-3), and no sampler generates on those live weights outside autocast
    (``sampling.backend: hf``)."""
    from rlvr.recipe.sampler_backends import SAMPLER_BACKENDS

    return bool(recipe.model.lora) and policy.autocast(recipe.model.dtype) and zero_stage != 3 \
        and not SAMPLER_BACKENDS[recipe.sampling.backend].live


def build_policy(recipe, model_path: str, *, world: int, device, policy):
    """(DeepSpeedBackend, reference model or None, zero stage) for a recipe, under the
    ``rlvr.kit.device.DevicePolicy`` ``policy``: DeepSpeed's bf16 or fp16 mode where it says
    (its weights and the reference's then in that dtype), float32 weights otherwise (a bfloat16
    trainer on a CPU is autocast over them, a LoRA base then held in bfloat16: ``frozen_base_bf16``)."""
    import deepspeed
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.models.lora import fuse_lora_adds, hold_frozen_linears
    from rlvr.models.memory import own_mapped_tensors

    t, kl = recipe.trainer, recipe.algorithm.kl
    bf16, fp16 = policy.deepspeed_precision(recipe.model.dtype)
    ref_dtype = getattr(torch, policy.weights_dtype(recipe.model.dtype))
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, use_safetensors=True)
    model.config.use_cache = False
    if recipe.model.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if recipe.model.lora:
        from peft import LoraConfig, get_peft_model

        lc = recipe.model.lora
        model = get_peft_model(model, LoraConfig(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout,
                                                 target_modules=lc.target_modules, task_type="CAUSAL_LM"))
        fuse_lora_adds(model)  # each adapter's product added inside one matmul (rlvr.models.lora)
    zero_stage = effective_zero_stage(t, world)
    if frozen_base_bf16(recipe, policy, zero_stage):
        hold_frozen_linears(model, torch.bfloat16)
    if zero_stage != t.zero_stage:
        log.info("one rank, no offload: running DeepSpeed ZeRO stage 0 (trainer.zero_stage %d partitions nothing)",
                 t.zero_stage)
    config = deepspeed_config(t, world=world, zero_stage=zero_stage, bf16=bf16, fp16=fp16)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = None if t.offload_optimizer else build_optimizer(t, params)
    if t.offload_optimizer:  # only rank 0's log reaches the terminal
        say_first_build("cpu_adam", "its CPU Adam for trainer.offload_optimizer")
    engine, *_ = deepspeed.initialize(model=model, model_parameters=params, optimizer=optimizer, config=config)
    ref_model = None
    if kl.beta > 0 and not recipe.model.lora:  # with LoRA the reference is the adapter-free base
        ref_model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, use_safetensors=True)
        ref_model.config.use_cache = False
        if zero_stage == 3:
            ref_model, *_ = deepspeed.initialize(model=ref_model, config={**config, "zero_optimization": {"stage": 3}})
        else:
            ref_model = ref_model.to(device=device, dtype=ref_dtype)
        ref_model.eval()
    # the policy's weights that still view the mapped safetensors file (all of them in float32, the
    # embeddings and norms beside a base held in bfloat16) copied, so that the file's pages go
    # (rlvr.models.memory); a reference keeps its views: every page of its file is in use
    own_mapped_tensors(engine.module)
    backend = DeepSpeedBackend(engine, world=world, own_grad_norm=zero_stage == 0 and not (bf16 or fp16))
    return backend, ref_model, zero_stage


def exported_weights(module, zero3: bool, bucket_bytes: int = 64 << 20, dtype=None, *, changed_only: bool = False):
    """The trainer's weights as a sampler takes them: (name, full tensor) pairs in Hugging Face
    naming (a peft model's base names), in ``dtype`` when given (the sampler's: it is sent, and
    stored, in no other); under ZeRO-3 gathered a bucket at a time, in the transfer's own buckets
    (``rlvr.sampling.transfer.wire.buckets``: consecutive parameters of at most ``bucket_bytes``,
    one larger parameter alone).

    A LoRA model's adapters are merged one weight at a time as it goes (``rlvr.models.lora.
    merged_weight``: a new tensor, the model untouched) when every LoRA layer is plain and
    unmerged and the weights are whole (not ZeRO-3); else merge them first, as ``sync_weights``
    does (``merged_adapters``). Merged as it goes, and ``changed_only``, it leaves out what LoRA
    does not change (``rlvr.models.lora.adapted_parameters``: embeddings, norms, an output head).

    Every rank must drain this iterator: ZeRO-3 gathers are collective.
    """
    from rlvr.models.lora import adapted_parameters, merged_weight, merges_apart

    named = list(base_named_parameters(module))
    if not zero3:
        apart = merges_apart(module)
        if changed_only and apart:
            sent = adapted_parameters(module)
            named = [(name, param) for name, param in named if id(param) in sent]
        for name, param in named:
            layer = apart.get(id(param))
            tensor = merged_weight(layer, dtype) if layer is not None else param.detach()
            yield name, tensor if dtype is None else tensor.to(dtype)
        return
    import deepspeed

    from rlvr.sampling.transfer.wire import buckets

    for part in buckets(named, bucket_bytes):
        with deepspeed.zero.GatheredParameters([p for _, p in part], modifier_rank=None):
            for name, param in part:
                yield name, param.detach().to(dtype or param.dtype, copy=True)


def base_named_parameters(module):
    """Parameters under their base-model names: a peft model's adapter tensors are left out and
    its wrapped layers' names unwrapped."""
    for name, param in module.named_parameters():
        if "lora_" in name or "modules_to_save" in name:
            continue
        name = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
        yield name, param


def sync_weights(module, sampler, *, lora: bool, zero3: bool, bucket_bytes: int = 64 << 20,
                 complete: bool = True) -> float:
    """Push the policy's weights into the sampler, in the sampler's dtype (``weights_dtype``, when
    it says); seconds taken. LoRA adapters are merged as the weights go (``exported_weights``),
    or into the model for the while (``merged_adapters``: ZeRO-3, adapters peft merges otherwise).
    ``complete`` False, for a sampler that holds the run's frozen weights already (it started from
    the same model, or was sent them whole once): a LoRA run merged as it goes sends only the
    modules its adapters change (for Qwen2.5-0.5B, 358M of 630M parameters)."""
    import torch

    from rlvr.models.lora import merged_adapters, merges_apart

    start = time.perf_counter()
    merge_first = lora and (zero3 or not merges_apart(module))
    partial = lora and not merge_first and not complete
    with merged_adapters(module) if merge_first else nullcontext(), torch.no_grad():
        weights = exported_weights(module, zero3, bucket_bytes, getattr(sampler, "weights_dtype", None),
                                   changed_only=partial)
        sampler.load_weights(weights, complete=not partial)
    return time.perf_counter() - start
