"""The samplers a recipe may choose (``sampling.backend``), each declared once with what it can do.

Callers ask for a capability, never for a name: the schema (``spec``) refuses server mode for a
backend that cannot serve and ``max_staleness`` for one that samples the live model; the engine
asks whether the sampler's log-probs come free and what dtype it samples in; ``rlvr eval`` whether
it must load a model for it; ``rlvr sampler`` whether it serves. Torch-free: ``rlvr validate``
reads it before any model loads. ``builder`` names the function that builds the sampler
(``rlvr.sampling.samplers.make_sampler`` imports it); ``tests/unit/test_recipe_sampler_backends.py`` fails
when the schema, this table and the builders disagree.

A new backend: its ``SamplerBackend`` here, and a module with its sampler (the
``rlvr.sampling.samplers.Sampler`` protocol) and its builder; then its test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class SamplerBackend:
    name: str  # sampling.backend
    summary: str
    # Samples the live policy in the trainer's own process (the weights being trained): nothing
    # to sync, no process of its own, cannot run ahead of the trainer.
    live: bool
    # Returns each sampled token's log-probability at no extra cost: the engine always takes them
    # (the sampler-trainer mismatch is measured whatever the correction mode).
    free_logprobs: bool
    # Runs in processes of its own (sampling.mode: server; `rlvr sampler`).
    serves: bool
    # The dtype it samples in: "trainer" (the trainer's weights: bfloat16 under DeepSpeed's bf16 on
    # a GPU, float32 on CPU) or "sampling.dtype" (the recipe's rule, rlvr.sampling.samplers.sampler_dtype).
    dtype: Literal["trainer", "sampling.dtype"]
    builder: str  # "module:function" that builds it (see rlvr.sampling.samplers.make_sampler)


SAMPLER_BACKENDS: dict[str, SamplerBackend] = {backend.name: backend for backend in (
    SamplerBackend("vllm", "vLLM: colocated (one engine per trainer rank) or in processes of its own; "
                   "weights synced after every step", live=False, free_logprobs=True, serves=True,
                   dtype="sampling.dtype", builder="rlvr.sampling.samplers:make_vllm_sampler"),
    SamplerBackend("hf", "transformers generate on the live training model: slow, needs no vLLM",
                   live=True, free_logprobs=False, serves=False, dtype="trainer",
                   builder="rlvr.sampling.samplers:make_hf_sampler"),
)}

SamplerBackendName = Literal[tuple(SAMPLER_BACKENDS)]  # type: ignore[valid-type]


def backends_that(capability: str, value: bool = True) -> str:
    """The backends whose ``capability`` is ``value``, in a recipe's words: ``vllm``, or ``a or b``."""
    return " or ".join(name for name, b in SAMPLER_BACKENDS.items() if getattr(b, capability) == value)
