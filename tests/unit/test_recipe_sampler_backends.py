"""Sampler backends are declared once (rlvr.recipe.sampler_backends) and every caller asks for
a capability: the schema's choices, the table and the builders name the same backends, and a
backend's capabilities decide what a recipe may ask of it."""

from __future__ import annotations

import importlib
import inspect
import typing

import pytest

from rlvr.recipe.sampler_backends import SAMPLER_BACKENDS, SamplerBackend, backends_that
from rlvr.recipe.spec import Recipe, SamplingConfig
from rlvr.sampling import samplers

BASE = {"name": "t", "task": "t", "model": {"name": "m"}, "rewards": {"r": 1.0},
        "trainer": {"rollout_batch_size": 8, "micro_batch_size": 4}}


def test_the_schema_offers_exactly_the_declared_backends_and_each_has_a_builder():
    choices = typing.get_args(SamplingConfig.model_fields["backend"].annotation)
    assert list(choices) == list(SAMPLER_BACKENDS) and SamplingConfig().backend in SAMPLER_BACKENDS
    for name, backend in SAMPLER_BACKENDS.items():
        assert backend.name == name and backend.summary
        module, function = backend.builder.split(":")
        build = getattr(importlib.import_module(module), function)
        accepted = inspect.signature(build).parameters
        for argument in ("recipe", "model_path"):
            assert argument in accepted, (name, argument)
        assert any(p.kind is p.VAR_KEYWORD for p in accepted.values()), f"{name}: its builder must take **_"


def recipe(**sampling) -> Recipe:
    return Recipe.model_validate({**BASE, "sampling": sampling})


def test_capabilities_decide_what_a_recipe_may_ask(monkeypatch):
    with pytest.raises(ValueError, match="sampling.mode: server needs sampling.backend: vllm"):
        recipe(backend="hf", mode="server")
    with pytest.raises(ValueError, match="sampling.max_staleness >= 1 needs sampling.backend: vllm"):
        recipe(backend="hf", max_staleness=1)
    recipe(backend="vllm", mode="server", max_staleness=1)
    # a backend declared to serve and not live would be accepted by the same checks: they ask
    # for capabilities, not names (the messages name whichever backends have them)
    fake = SamplerBackend("fake", "a test double", live=False, free_logprobs=True, serves=True,
                          dtype="sampling.dtype", builder="rlvr.sampling.samplers:make_vllm_sampler")
    monkeypatch.setitem(SAMPLER_BACKENDS, "fake", fake)
    assert backends_that("serves") == "vllm or fake" and backends_that("live") == "hf"
    assert backends_that("live", False) == "vllm or fake"
    # and the schema follows: the same name with other capabilities is judged by them
    import dataclasses

    monkeypatch.setitem(SAMPLER_BACKENDS, "hf", dataclasses.replace(SAMPLER_BACKENDS["hf"], serves=True, live=False))
    recipe(backend="hf", mode="server", max_staleness=1)


def test_the_sampler_dtype_follows_the_backends_rule():
    from rlvr.kit.device import DevicePolicy

    cuda, cpu = DevicePolicy(cuda=True, cuda_rules=True, bf16=True), DevicePolicy(cuda=False, cuda_rules=False, bf16=True)
    assert samplers.backend_dtype(recipe(backend="hf"), cuda) == "bfloat16"
    assert samplers.backend_dtype(recipe(backend="hf"), cpu) == "float32"
    assert samplers.backend_dtype(recipe(backend="vllm", dtype="float16"), cpu) == "float16"
