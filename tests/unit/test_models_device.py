"""The CUDA decisions in one place (rlvr.kit.device.DevicePolicy), checked as pure functions
for the CPU's rules, CUDA's rules on a CPU and a real CUDA machine; and the log-probs of an output
head held in bfloat16, as DeepSpeed's bf16 mode holds it on a GPU (every bf16 `rlvr train` on an
H200 died there: "expected mat1 and mat2 to have the same dtype")."""

from __future__ import annotations

import pytest
import torch

from rlvr import RlvrError
from rlvr.kit.device import ENV, DevicePolicy, device_policy, rules_scope
from rlvr.training.losses import head_logprobs, token_logprobs_and_entropy

CPU = DevicePolicy(cuda=False, cuda_rules=False, bf16=False)
CPU_BF16 = DevicePolicy(cuda=False, cuda_rules=False, bf16=True)
AS_ON_CUDA = DevicePolicy(cuda=False, cuda_rules=True, bf16=True)
CUDA = DevicePolicy(cuda=True, cuda_rules=True, bf16=True)
OLD_CUDA = DevicePolicy(cuda=True, cuda_rules=True, bf16=False)  # a V100: no bfloat16


def test_the_issues_five_lines_now_work():
    head = torch.nn.Linear(16, 50, bias=False).to(torch.bfloat16)
    h = torch.randn(2, 5, 16, dtype=torch.bfloat16)
    logp, ent = head_logprobs(h.float(), head, torch.randint(0, 50, (2, 5)), torch.ones(2, 5))
    assert logp.dtype == torch.float32 and ent.dtype == torch.float32 and torch.isfinite(logp).all()


@pytest.mark.parametrize("chunk", [3, 256])
@pytest.mark.parametrize("hidden_dtype", [torch.bfloat16, torch.float32])
def test_a_bfloat16_head_gives_its_own_logits_log_softmax_in_float32(chunk, hidden_dtype):
    """Chunked or not, with and without gradient: what log-softmax over float32 copies of the
    head's bfloat16 logits gives, and the gradient reaches the hidden states and the head."""
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False).to(torch.bfloat16)
    hidden = torch.randn(2, 5, 16).to(hidden_dtype).requires_grad_()
    tokens, mask = torch.randint(0, 50, (2, 5)), torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    logp, ent = head_logprobs(hidden, head, tokens, mask, temperature=0.8, chunk_tokens=chunk)
    want_logits = head(hidden.detach().to(torch.bfloat16)).float() / 0.8
    want, want_ent = token_logprobs_and_entropy(want_logits, tokens)
    assert torch.allclose(logp[mask.bool()], want[mask.bool()], atol=1e-5)
    assert torch.allclose(ent[mask.bool()], want_ent[mask.bool()], atol=1e-4)
    assert (logp[~mask.bool()] == 0).all()
    logp.sum().backward()
    assert hidden.grad is not None and hidden.grad.dtype == hidden_dtype and head.weight.grad.dtype == torch.bfloat16


def test_a_float32_head_is_unchanged_under_cpu_autocast():
    """The CPU's bfloat16 path (autocast over float32 weights): bfloat16 hidden states meet a
    float32 head in float32, as before."""
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False)
    hidden = torch.randn(2, 5, 16, dtype=torch.bfloat16)
    tokens, mask = torch.randint(0, 50, (2, 5)), torch.ones(2, 5)
    logp, _ = head_logprobs(hidden, head, tokens, mask)
    want, _ = token_logprobs_and_entropy(head(hidden.float()), tokens)
    assert torch.allclose(logp, want, atol=1e-6)


@pytest.mark.parametrize("policy, model_dtype, want", [
    # (deepspeed bf16, fp16), autocast, weights, trainer dtype
    (CPU, "auto", ((False, False), False, "float32", "float32")),
    (CPU_BF16, "auto", ((False, False), True, "float32", "bfloat16")),
    (CPU, "bfloat16", ((False, False), True, "float32", "bfloat16")),
    (CPU, "float16", ((False, True), False, "float16", "float16")),
    (AS_ON_CUDA, "auto", ((True, False), False, "bfloat16", "bfloat16")),
    (AS_ON_CUDA, "float32", ((False, False), False, "float32", "float32")),
    (CUDA, "auto", ((True, False), False, "bfloat16", "bfloat16")),
    (CUDA, "float16", ((False, True), False, "float16", "float16")),
    (OLD_CUDA, "auto", ((False, False), False, "float32", "float32")),
])
def test_precision_decisions(policy, model_dtype, want):
    got = (policy.deepspeed_precision(model_dtype), policy.autocast(model_dtype), policy.weights_dtype(model_dtype),
           policy.trainer_dtype(model_dtype))
    assert got == want


def test_the_sampler_follows_the_trainers_weights_or_its_own_dtype():
    from rlvr.recipe.spec import Recipe
    from rlvr.sampling.samplers import backend_dtype

    def recipe(backend, dtype="auto", model_dtype="auto"):
        return Recipe.model_validate({"name": "t", "task": "arithmetic", "rewards": {"math": 1.0}, "model": {"dtype": model_dtype},
                                      "sampling": {"backend": backend, "dtype": dtype}})

    assert backend_dtype(recipe("hf"), AS_ON_CUDA) == "bfloat16"  # generate on the live bf16 weights
    assert backend_dtype(recipe("hf"), CUDA) == "bfloat16"
    assert backend_dtype(recipe("hf"), CPU_BF16) == "float32"  # autocast's float32 weights
    assert backend_dtype(recipe("hf", model_dtype="float16"), CUDA) == "float16"
    assert backend_dtype(recipe("vllm"), CUDA) == "bfloat16"
    assert backend_dtype(recipe("vllm", dtype="float16"), CPU) == "float16"


def test_placement_and_collectives():
    assert CPU.dist_backend() == "gloo" and AS_ON_CUDA.dist_backend() == "gloo"  # tensors stay on the CPU
    assert CUDA.dist_backend() == "nccl"
    assert CUDA.dist_backend(torch.device("cpu")) == "gloo" and CPU.dist_backend(torch.device("cuda", 1)) == "nccl"
    assert AS_ON_CUDA.device(3) == torch.device("cpu") and CUDA.device(3) == torch.device("cuda", 3)
    assert (CPU.micro_batch_overhead, AS_ON_CUDA.micro_batch_overhead, CUDA.micro_batch_overhead) == (64, 64, 512)
    assert AS_ON_CUDA.rng_state() is None
    AS_ON_CUDA.bind(torch.device("cpu"))  # nothing to bind on a CPU
    from rlvr.kit.device import empty_cache, synchronize

    empty_cache(torch.device("cpu"))  # nothing to give back on a CPU
    synchronize(torch.zeros(2))


def test_reward_model_placement():
    assert CPU.reward_model_dtype("auto", "auto") == "float32"
    assert AS_ON_CUDA.reward_model_dtype("auto", "auto") == "bfloat16"  # the card's, on the CPU
    assert CUDA.reward_model_dtype("auto", "cpu") == "float32"
    assert OLD_CUDA.reward_model_dtype("auto", "cuda:0") == "float16"
    assert CUDA.reward_model_dtype("float32", "auto") == "float32"
    assert AS_ON_CUDA.reward_model_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="no CUDA device is visible"):
        AS_ON_CUDA.reward_model_device("cuda:0")


def test_the_rules_come_from_the_environment(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    here = device_policy()
    assert here.cuda == torch.cuda.is_available() and here.cuda_rules == here.cuda
    with rules_scope("cuda") as policy:
        assert policy.cuda_rules and policy.bf16 and device_policy() == policy
    assert ENV not in __import__("os").environ
    monkeypatch.setenv(ENV, "CPU ")
    assert not device_policy().cuda and not device_policy().cuda_rules
    monkeypatch.setenv(ENV, "gpu")
    with pytest.raises(RlvrError, match="RLVR_DEVICE_POLICY='gpu': one of auto, cuda, cpu"):
        device_policy()


def test_no_cuda_call_outside_the_policy():
    """Every ``torch.cuda`` call of rlvr and its plugins is in rlvr/kit/device.py (and the
    doctor's report, which reads the GPUs): a new one elsewhere would go untested on CPU."""
    import re

    from helpers import ROOT

    allowed = {"rlvr/kit/device.py", "rlvr/training/doctor.py"}
    found = []
    for path in [*ROOT.joinpath("rlvr").rglob("*.py"), *ROOT.joinpath("plugins").rglob("*.py")]:
        rel = path.relative_to(ROOT).as_posix()
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"torch\.cuda\.|\.is_cuda\b", line) and rel not in allowed:
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_fp16_needs_cuda():
    assert "needs a CUDA device" in CPU.dtype_problem("float16")
    assert CPU.dtype_problem("auto") is None and CPU_BF16.dtype_problem("bfloat16") is None
    assert CUDA.dtype_problem("float16") is None and AS_ON_CUDA.dtype_problem("float16") is None


def test_bfloat16_pinned_on_a_cpu_without_it_is_named_with_the_way_out():
    note = CPU.emulated_bf16("bfloat16", "bfloat16")
    assert note.startswith("model.dtype and sampling.dtype: bfloat16 on a CPU without bf16 instructions")
    assert "dtype: auto is float32 here" in note
    assert CPU.emulated_bf16("auto", "bfloat16").startswith("sampling.dtype:")
    # auto, float32, a CPU that has bf16, or a GPU: nothing to say
    assert CPU.emulated_bf16("auto") is None and CPU.emulated_bf16("float32", "float32") is None
    assert CPU_BF16.emulated_bf16("bfloat16", "bfloat16") is None
    assert CUDA.emulated_bf16("bfloat16") is None and AS_ON_CUDA.emulated_bf16("bfloat16") is None


def test_vllm_takes_float16_on_a_card_without_bfloat16():
    """vLLM 0.32 refuses bfloat16 below compute capability 8.0 (platforms/cuda.py): a T4 or V100
    samples in float16 by default."""
    from rlvr.kit.device import sampler_dtype

    assert sampler_dtype("auto", on_cpu=False, card_bf16=False) == "float16"
    assert sampler_dtype("auto", on_cpu=False, card_bf16=True) == "bfloat16"
    assert sampler_dtype("bfloat16", on_cpu=False, card_bf16=False) == "bfloat16"  # asked for: vLLM says no
    assert sampler_dtype("auto", on_cpu=False) == ("bfloat16" if device_policy().bf16 or not device_policy().cuda
                                                   else "float16")


def test_vllm_on_gpus_refuses_what_nccl_would_refuse_at_the_first_sync():
    """NCCL refuses two ranks on one GPU: a colocated engine per rank on several GPU ranks, or a
    sampler process without devices (GPU 0, trainer rank 0's) or on a trainer's GPU, would fail at
    the first weight sync; refused before any model loads, with what to do."""
    from rlvr.recipe.spec import Recipe
    from rlvr.sampling.samplers import same_gpu_problem, trainer_gpus

    def recipe(**sampling):
        return Recipe.model_validate({"name": "t", "task": "arithmetic", "rewards": {"math": 1.0},
                                      "sampling": sampling})

    colocated, hf = recipe(), recipe(backend="hf")
    assert same_gpu_problem(colocated, cuda=True, world=1, trainer=[0]) is None  # in-process: no NCCL
    assert "colocated vLLM on 4 GPU ranks" in same_gpu_problem(colocated, cuda=True, world=4, trainer=[0, 1, 2, 3])
    assert same_gpu_problem(colocated, cuda=False, world=4, trainer=[0, 1, 2, 3]) is None  # gloo on CPUs
    assert same_gpu_problem(hf, cuda=True, world=4, trainer=[0, 1, 2, 3]) is None
    bare = recipe(mode="server")
    assert "needs sampling.server.devices: GPUs apart from the trainer's (0,1)" in \
        same_gpu_problem(bare, cuda=True, world=2, trainer=[0, 1])
    assert "[1] are trainer GPUs too" in same_gpu_problem(recipe(mode="server", server={"devices": [1, 2]}),
                                                          cuda=True, world=2, trainer=[0, 1])
    assert same_gpu_problem(recipe(mode="server", server={"devices": [2, 3]}), cuda=True, world=2,
                            trainer=[0, 1]) is None
    assert same_gpu_problem(recipe(mode="server", server={"urls": ["http://127.0.0.1:8000"]}), cuda=True, world=1,
                            trainer=[0]) is None  # started by hand: where it runs is its own business
    # docs/clusters.md's node: trainers on GPUs 2-7 (DeepSpeed's --include sets CUDA_VISIBLE_DEVICES), samplers on 0, 1
    six = trainer_gpus(6, "2,3,4,5,6,7")
    assert six == [2, 3, 4, 5, 6, 7]
    assert same_gpu_problem(recipe(mode="server", server={"count": 2, "devices": [0, 1]}), cuda=True, world=6,
                            trainer=six) is None
    assert trainer_gpus(2, None) == [0, 1] and trainer_gpus(2, "GPU-4dca,GPU-77ab") is None


def test_the_engine_refuses_them_before_any_model_loads(tmp_path, monkeypatch):
    """`rlvr train` on two GPU ranks with colocated vLLM: the refusal comes before a process group,
    a model or an output folder exists (here as on a GPU machine: the policy says CUDA)."""
    import rlvr.training.engine as engine
    from rlvr.recipe.spec import Recipe

    monkeypatch.setattr(engine, "device_policy", lambda: CUDA)
    monkeypatch.setattr(engine, "build_policy", lambda *a, **k: pytest.fail("a model was built"))
    for key, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(key, value)
    recipe = Recipe.model_validate({"name": "t", "task": "arithmetic", "rewards": {"math": 1.0},
                                    "trainer": {"rollout_batch_size": 16, "micro_batch_size": 4}})
    with pytest.raises(RlvrError, match="colocated vLLM on 2 GPU ranks"):
        engine.train(recipe, None, tmp_path / "run")
    assert not (tmp_path / "run" / "train.log").exists()
