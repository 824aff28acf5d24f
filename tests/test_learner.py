"""The policy update (rlvr.training.learner) on fixed batches with a tiny model and a plain-torch optimizer
side: same loss and gradients as the engine before it was split into parts; log-probs at the
sampling temperature; one learning rate per training step."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from rlvr.recipe.spec import AlgorithmConfig, LengthPenaltyConfig
from rlvr.sampling.samplers import Completion
from rlvr.training.learner import Learner, sequence_weights, shape_rewards
from rlvr.training.rollout import Rollout

DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))
import record_engine_reference as ref  # noqa: E402 - the recording script's batches and tiny models

REFERENCE = json.loads((DATA / "engine_reference.json").read_text())


class SGDBackend:
    """The learner's optimizer side in plain torch: accumulate, then SGD; records each step's gradients."""

    def __init__(self, model):
        self.policy = self.module = model
        self.lr, self.records, self.backwards = None, [], 0

    def backward(self, loss):
        loss.backward()
        self.backwards += 1

    def step(self) -> float:
        grads = {n: p.grad.detach().clone() for n, p in self.module.named_parameters() if p.grad is not None}
        self.records.append((self.lr, grads))
        with torch.no_grad():
            for p in self.module.parameters():
                if p.grad is not None:
                    p.sub_(self.lr * p.grad)
                    p.grad = None
        return float(torch.nn.utils.get_total_norm(list(grads.values())))

    def set_lr(self, lr):
        self.lr = lr


def algorithm(case: dict) -> AlgorithmConfig:
    penalty = case["length_penalty"]
    return AlgorithmConfig(
        normalize_advantages=case["normalize"], ppo_epochs=case["ppo_epochs"], loss_aggregation=case["aggregation"],
        clip={"eps_low": case["clip"][0], "eps_high": case["clip"][1]} if case["clip"] else None,
        kl={"beta": case["beta"], "estimator": case["estimator"], "target": case["target"]},
        length_penalty={"weight": penalty[0], "correct_threshold": penalty[1]} if penalty else None,
        mask_truncated=case["mask_truncated"])


def reference_rollout() -> Rollout:
    completions = [Completion("", list(ids), truncated) for ids, truncated in ref.COMPLETIONS]
    return Rollout(group_size=ref.K, prompt_ids=ref.PROMPTS, completions=completions, rewards=list(ref.REWARDS),
                   reward_values={})


@pytest.mark.parametrize("name", sorted(REFERENCE["cases"]))
def test_update_matches_the_engine_before_the_split(name):
    recorded = REFERENCE["cases"][name]
    case = recorded["config"]
    policy, reference_model = ref.tiny_models()
    backend = SGDBackend(policy)
    learner = Learner(backend, algorithm(case), micro_batch_size=ref.MICRO, temperature=1.0, pad_id=ref.PAD,
                      device=torch.device("cpu"), share_prompts=case.get("share_prompts", True),
                      ref_model=reference_model if case["beta"] > 0 else None)
    stats = learner.update(reference_rollout(), lr=ref.SGD_LR)
    assert stats["loss"] == pytest.approx(recorded["epoch_losses"][0], abs=1e-6)
    for key in ("kl", "entropy", "clip_low", "clip_high", "tokens"):
        assert stats[key] == pytest.approx(recorded["sums"][key], rel=1e-5, abs=1e-6), key
    assert len(backend.records) == case["ppo_epochs"] == len(recorded["grads"])
    for (_, grads), expected in zip(backend.records, recorded["grads"]):
        assert set(grads) == set(expected)
        for param, summary in expected.items():
            flat = grads[param].flatten().double()
            assert float(flat.norm()) == pytest.approx(summary["norm"], rel=1e-4, abs=1e-7), param
            assert float(flat.sum()) == pytest.approx(summary["sum"], rel=1e-4, abs=1e-6), param
            assert flat[::29].tolist() == pytest.approx(summary["every29"], rel=1e-4, abs=1e-6), param


def test_one_learning_rate_per_training_step_whatever_the_ppo_epochs():
    policy, _ = ref.tiny_models()
    backend = SGDBackend(policy)
    case = REFERENCE["cases"]["clip_ppo2_kl_loss_k3_token_mean"]["config"]
    learner = Learner(backend, algorithm({**case, "beta": 0.0}), micro_batch_size=ref.MICRO, temperature=1.0,
                      pad_id=ref.PAD, device=torch.device("cpu"), share_prompts=True)
    learner.update(reference_rollout(), lr=0.25)
    assert [lr for lr, _ in backend.records] == [0.25, 0.25]  # two optimizer steps, one rate
    assert backend.backwards == 2 * 2  # two micro-batches, two epochs


def test_shaping_and_weights():
    penalty = LengthPenaltyConfig(weight=0.5, correct_threshold=1.0)
    # group 1: correct lengths 2 and 6 -> -0.5 on the longer; group 2 has no correct answer
    assert shape_rewards([1.0, 1.0, 0.0, None], [2, 6, 1, 3], 4, penalty) == [1.0, 0.5, 0.0, None]
    assert shape_rewards([1.0, None], [3, 4], 2, None) == [1.0, None]
    assert sequence_weights([True, True, False], [False, True, False], True) == [1.0, 0.0, 0.0]
    assert sequence_weights([True, True, False], [False, True, False], False) == [1.0, 1.0, 0.0]


@pytest.mark.parametrize("temperature", [0.6, 1.7])
def test_trainer_logprobs_are_the_samplers_at_the_sampling_temperature(tiny_model, temperature):
    """Completions drawn at T are scored by the trainer under softmax(logits / T): the same
    log-probs the sampler drew them with (transformers' processed scores)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.sampling.samplers import HFSampler

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    prompts = [tokenizer("What is 2+3?")["input_ids"], tokenizer("Name a colour, then stop.")["input_ids"]]
    sampler = HFSampler(lambda: model, tokenizer, synced=False)
    groups = sampler.generate(prompts, n=3, temperature=temperature, top_p=1.0, max_tokens=6, seed=0, logprobs=True)
    seq_prompts = [p for p, g in zip(prompts, groups) for _ in g]
    completions = [c for g in groups for c in g]
    learner = Learner(SGDBackend(model), AlgorithmConfig(), micro_batch_size=6, temperature=temperature,
                      pad_id=tokenizer.pad_token_id or 0, device=torch.device("cpu"), share_prompts=True)
    with torch.no_grad():
        logp, mask, _ = learner.logprobs(model, seq_prompts, [c.token_ids for c in completions])
    for row, c in enumerate(completions):
        assert mask[row].sum() == len(c.token_ids) == len(c.logprobs)
        assert logp[row, : len(c.token_ids)].tolist() == pytest.approx(c.logprobs, abs=2e-4)
