"""Training under CUDA's rules on the CPU (RLVR_DEVICE_POLICY=cuda): the weights in bfloat16 (or
float16) under DeepSpeed's bf16 (fp16) mode, no autocast, the HF sampler generating with the
trainer's bf16 weights, the reference and reward_model in the card's dtype. What a GPU runs, bar
the kernels, on every CI run: full fine-tuning at ZeRO-0, ZeRO-2 and ZeRO-3 (two ranks), LoRA, KL
against a reference model and against LoRA's base, reward_model inline and in its process, fp16.
On the code before the policy existed, the first of these died in its first micro-batch."""

from __future__ import annotations

import json
import math
import socket

import pytest
import torch

import rlvr.api
from helpers.runs import train_two_ranks
from rlvr.kit.device import rules_scope
from rlvr.models.tiny import build_tiny_model
from rlvr.api.smoke import text_hash

ROWS = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(3, 9) for b in range(2, 6)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("as-on-cuda")
    return build_tiny_model(root / "policy"), build_tiny_model(root / "scorer", seed=1, reward_model=True)


def recipe(model, scorer=None, *, placement="inline", lora=False, beta=0.0, dtype="auto", zero=0, steps=2):
    rewards = {"text_hash": 1.0}
    if scorer is not None:
        rewards["reward_model"] = {"weight": 0.5, "options": {"model": str(scorer), "placement": placement,
                                                              "max_length": 128}}
    return {
        "name": "as-on-cuda",
        "task": {"name": "sums"},
        "prompt": {"template": "{{question}}"},
        "rewards": rewards,
        "model": {"name": str(model), "dtype": dtype, **({"lora": {"r": 4, "alpha": 8}} if lora else {})},
        "sampling": {"backend": "hf", "num_generations": 4, "max_tokens": 8},
        "trainer": {"steps": steps, "rollout_batch_size": 8, "micro_batch_size": 4, "lr": 1e-3, "zero_stage": zero,
                    "save_every": steps, "samples_every": 0, "report_to": []},
        "algorithm": {"kl": {"beta": beta, "target": "loss"}, "clip": {"eps_low": 0.2, "eps_high": 0.28},
                      "ppo_epochs": 2},
    }


def train_as_on_cuda(tmp_path, monkeypatch, spec) -> tuple[list[dict], dict]:
    """Train ``spec`` in this process under CUDA's rules; the metric rows, and the dtypes the
    policy's and the reference's weights were held in."""
    import rlvr.training.engine as engine

    seen = {}
    build = engine.build_policy

    def recording(*args, **kwargs):
        backend, ref_model, zero_stage = build(*args, **kwargs)
        seen["policy"] = {p.dtype for p in backend.module.parameters()}
        seen["trained"] = {p.dtype for p in backend.module.parameters() if p.requires_grad}
        seen["reference"] = None if ref_model is None else {p.dtype for p in ref_model.parameters()}
        return backend, ref_model, zero_stage

    monkeypatch.setattr(engine, "build_policy", recording)
    with rules_scope("cuda"):
        result = rlvr.api.train(spec, rewards={"text_hash": text_hash}, tasks={"sums": ROWS},
                                output_dir=tmp_path / "run")
    rows = result.metrics()
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]), r
    assert any(r["grad_norm"] > 0 for r in rows)
    return rows, seen


def test_full_fine_tuning_at_zero_0_with_a_reference_and_an_inline_reward_model(tmp_path, monkeypatch, models):
    policy, scorer = models
    rows, seen = train_as_on_cuda(tmp_path, monkeypatch, recipe(policy, scorer, beta=0.05))
    assert seen["policy"] == {torch.bfloat16} and seen["reference"] == {torch.bfloat16}
    assert all(r["kl"] >= 0 for r in rows) and any(r["kl"] > 0 for r in rows)  # the reference was read
    assert all(r["reward/reward_model"] is not None for r in rows)


def test_lora_with_its_base_as_reference_and_reward_model_in_its_process(tmp_path, monkeypatch, models):
    policy, scorer = models
    rows, seen = train_as_on_cuda(tmp_path, monkeypatch, recipe(policy, scorer, placement="process", lora=True,
                                                                 beta=0.05))
    assert seen["reference"] is None  # LoRA's reference: the policy with its adapters off
    assert torch.bfloat16 in seen["policy"]
    assert any(r["kl"] > 0 for r in rows)
    assert all(r["reward/reward_model"] is not None for r in rows)
    final = tmp_path / "run" / "final"
    assert final.is_dir()


def test_fp16_under_deepspeeds_loss_scaler(tmp_path, monkeypatch, models):
    """DeepSpeed's CPU accelerator refuses fp16 outright (a CPU run is refused before any model
    loads: test_fp16_on_a_cpu_is_one_line); told it may, its fp16 engine and loss scaler run."""
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    monkeypatch.setattr(CPU_Accelerator, "is_fp16_supported", lambda self: True)
    policy, _ = models
    _, seen = train_as_on_cuda(tmp_path, monkeypatch, recipe(policy, dtype="float16"))
    assert seen["policy"] == {torch.float16}


def test_fp16_on_a_cpu_is_one_line(tmp_path, models, monkeypatch):
    """Under the CPU's rules ``model.dtype: float16`` is refused before any model loads."""
    from rlvr import RlvrError

    monkeypatch.setenv("RLVR_DEVICE_POLICY", "cpu")
    with pytest.raises(RlvrError, match="model.dtype float16 needs a CUDA device"):
        rlvr.api.train(recipe(models[0], dtype="float16"), rewards={"text_hash": text_hash}, tasks={"sums": ROWS},
                       output_dir=tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("zero", [2, 3])
def test_two_ranks_under_cuda_rules(tmp_path, models, test_plugin, zero):
    """ZeRO-2 and ZeRO-3 on two ranks (gloo: the tensors are on the CPU), bf16 weights; at
    ZeRO-3 the reference is a DeepSpeed engine of its own and the HF sampler gathers the shards."""
    import os

    policy, _ = models
    spec = recipe(policy, zero=zero, beta=0.05 if zero == 3 else 0.0)
    spec["task"] = {"name": "arithmetic", "options": {"size": 64}}
    spec["rewards"] = {"even_tokens": 1.0}  # the test plugin's: a CLI run takes registered rewards
    path = tmp_path / "recipe.yaml"
    path.write_text(json.dumps(spec))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(test_plugin), "RLVR_LOAD_PLUGINS": "tasks,testplug",
           "RLVR_DEVICE_POLICY": "cuda"}
    rows = train_two_ranks(path, tmp_path / "run", env, port)
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in rows)
    assert any(r["grad_norm"] > 0 for r in rows)
    if zero == 3:
        assert any(r["kl"] > 0 for r in rows)
    log = (tmp_path / "run" / "train.log").read_text()
    assert "CUDA's (on the CPU, RLVR_DEVICE_POLICY=cuda) rules" in log and "weights in bfloat16" in log
