"""The policy update (rlvr.training.learner) on fixed batches with a tiny model and a plain-torch optimizer
side: same loss and gradients as the engine before it was split into parts; log-probs at the
sampling temperature; one learning rate per training step."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from rlvr.recipe.spec import AlgorithmConfig
from rlvr.sampling.samplers import Completion
from rlvr.training.learner import Learner
from rlvr.training.rollout import Rollout

DATA = Path(__file__).resolve().parents[1] / "data"
sys.path.insert(0, str(DATA))
import record_engine_reference as ref  # noqa: E402 - the recording script's batches and tiny models
from helpers.learner import SGDBackend, run_update, skip_rollout  # noqa: E402

REFERENCE = json.loads((DATA / "engine_reference.json").read_text())


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


@pytest.mark.parametrize("chunk", [0, 3], ids=["logits", "head_chunks"])
@pytest.mark.parametrize("skip", [False, True], ids=["every_sequence", "skipping"])
@pytest.mark.parametrize("name", sorted(REFERENCE["cases"]))
def test_update_matches_the_engine_before_the_split(name, skip, chunk):
    """Same loss and gradients as the recorded engine; with sequences without gradient skipped
    too (the per-token figures are then over the trained tokens only), and with log-probs from
    the output head in chunks (float rounding of another summation order: 1e-5)."""
    recorded = REFERENCE["cases"][name]
    case = recorded["config"]
    policy, reference_model = ref.tiny_models()
    backend = SGDBackend(policy)
    learner = Learner(backend, algorithm(case), micro_batch_size=ref.MICRO, temperature=1.0, pad_id=ref.PAD,
                      device=torch.device("cpu"), share_prompts=case.get("share_prompts", True),
                      ref_model=reference_model if case["beta"] > 0 else None, skip_zero_advantage=skip,
                      logprob_chunk_tokens=chunk)
    stats = learner.update(reference_rollout(), lr=ref.SGD_LR).sums
    tolerance = dict(rel=1e-5, abs=1e-6) if chunk == 0 else dict(rel=1e-4, abs=1e-5)
    assert stats["loss"] == pytest.approx(recorded["epoch_losses"][0], **tolerance)
    # The recorded engine counted clipping in the first epoch, where every ratio is 1 (so 0 with
    # ppo_epochs > 1); the learner counts the last epoch's: compared where the two are the same.
    clip_keys = ("clip_low", "clip_high") if case["ppo_epochs"] == 1 else ()
    if case["ppo_epochs"] > 1:
        assert recorded["sums"]["clip_low"] == recorded["sums"]["clip_high"] == 0.0
    if not skip or stats["skipped_seqs"] == 0:
        for key in ("entropy", "tokens", *clip_keys):
            assert stats[key] == pytest.approx(recorded["sums"][key], **tolerance), key
        # The KL sum adds differences of float32 log-probs of about -5 each: its rounding is
        # absolute, about 1e-6 per hundred tokens (1.4e-6 between one torch thread and two).
        assert stats["kl"] == pytest.approx(recorded["sums"]["kl"], rel=tolerance["rel"], abs=1e-5)
    assert len(backend.records) == case["ppo_epochs"] == len(recorded["grads"])
    for (_, grads), expected in zip(backend.records, recorded["grads"]):
        assert set(grads) == set(expected)
        for param, summary in expected.items():
            flat = grads[param].flatten().double()
            assert float(flat.norm()) == pytest.approx(summary["norm"], rel=1e-4, abs=1e-7), param
            # a sum of terms of both signs (the head's is 0 but for rounding: softmax gradients sum
            # to 0) errs in proportion to the norm: 1.4e-6 against -1.3e-7 at a norm of 6.5 on an EPYC
            assert float(flat.sum()) == pytest.approx(summary["sum"], rel=1e-4, abs=max(1e-6, 1e-6 * summary["norm"])), param
            assert flat[::29].tolist() == pytest.approx(summary["every29"], rel=1e-4, abs=1e-6), param


def test_one_learning_rate_per_training_step_whatever_the_ppo_epochs():
    policy, _ = ref.tiny_models()
    backend = SGDBackend(policy)
    case = REFERENCE["cases"]["clip_ppo2_kl_loss_k3_token_mean"]["config"]
    learner = Learner(backend, algorithm({**case, "beta": 0.0}), micro_batch_size=ref.MICRO, temperature=1.0,
                      pad_id=ref.PAD, device=torch.device("cpu"), share_prompts=True, skip_zero_advantage=False)
    learner.update(reference_rollout(), lr=0.25)
    assert [lr for lr, _ in backend.records] == [0.25, 0.25]  # two optimizer steps, one rate
    assert backend.backwards == 2 * 2  # two micro-batches, two epochs


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


# ------------------------------------------------------------- sequences without gradient are skipped
# skip_rollout (tests/helpers/learner.py): group 0 has no reward variance, in group 1 a 0.5 gets
# advantage exactly 0, and a truncated sequence under mask_truncated has weight 0.
SKIP_CASES = {
    "plain": {},
    # SGD at lr 0.5 moves ratios to 0.39-2.41 by the second epoch: with these bounds 5 of the 9 trained
    # tokens clip under seq_mean_token_sum, none under the others, and every epoch has a gradient
    "ppo2_clip": {"ppo_epochs": 2, "clip": {"eps_low": 0.55, "eps_high": 1.3}},
    "is_tis_ppo2": {"ppo_epochs": 2, "clip": {"eps_low": 0.2, "eps_high": 0.28}, "is_correction": {"mode": "tis"}},
    # KL in the reward gives every sequence its own reward: only the weight-0 (truncated) ones skip
    "kl_in_reward_ppo2": {"kl": {"beta": 0.1, "estimator": "k3", "target": "reward"}, "ppo_epochs": 2,
                          "mask_truncated": True},
    "group_std_mask_truncated": {"normalize_advantages": "group_std", "mask_truncated": True},
    # The policy-loss variants (tests/unit/test_training_loss_variants.py): in the second epoch the bounds bite.
    # GSPO: of the two trained sequences, the one of A < 0 is clipped (its ratio s is 0.44 to 0.84,
    # with tis 0.92 to 0.995, depending on the aggregation), the one of A > 0 is not (s 1.26 to
    # 2.29; with tis 1.009 to 1.14). CISPO: the weights of some tokens are clipped.
    "gspo_ppo2": {"policy_loss": "gspo", "gspo": {"eps_low": 0.1, "eps_high": 2.0}, "ppo_epochs": 2},
    "gspo_is_tis_ppo2": {"policy_loss": "gspo", "gspo": {"eps_low": 0.002, "eps_high": 0.5}, "ppo_epochs": 2,
                         "is_correction": {"mode": "tis"}},
    "cispo_ppo2": {"policy_loss": "cispo", "cispo": {"eps_high": 1e-3}, "ppo_epochs": 2},
    "cispo_is_tis_ppo2": {"policy_loss": "cispo", "cispo": {"eps_low": 1e-3, "eps_high": 1e-3}, "ppo_epochs": 2,
                          "is_correction": {"mode": "tis"}},
}


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_sum", "seq_mean_token_mean",
                                         "seq_mean_token_sum_norm"])
@pytest.mark.parametrize("case", sorted(SKIP_CASES))
def test_skipping_sequences_without_gradient_changes_no_gradient(case, aggregation):
    norm = 16 if aggregation == "seq_mean_token_sum_norm" else None
    algo = AlgorithmConfig(loss_aggregation=aggregation, loss_norm_tokens=norm, **SKIP_CASES[case])
    is_mode = algo.is_correction.mode if algo.is_correction.mode != "auto" else "none"
    full, full_backend = run_update(algo, skip=False, is_mode=is_mode)
    skipped, skip_backend = run_update(algo, skip=True, is_mode=is_mode)
    # group 0 and the advantage-0 sequence; with KL in the reward, the two truncated ones
    assert full["skipped_seqs"] == 0 and skipped["skipped_seqs"] >= (2 if "kl" in case else 5)
    assert skip_backend.backwards < full_backend.backwards
    assert skipped["forward_tokens"] < full["forward_tokens"]
    assert len(skip_backend.records) == len(full_backend.records) == algo.ppo_epochs
    if case == "ppo2_clip":  # the clip fractions are the last epoch's (the first one's ratios are all 1)
        clipped = 5 if aggregation == "seq_mean_token_sum" else 0
        assert skipped["clip_low"] + skipped["clip_high"] == full["clip_low"] + full["clip_high"] == clipped
    # a real gradient in every epoch: the comparison below is of non-zeros
    for _, grads in full_backend.records:
        assert any(float(g.abs().max()) > 1e-5 for g in grads.values())
    for (_, with_all), (_, without) in zip(full_backend.records, skip_backend.records):
        assert set(with_all) == set(without)
        for name, grad in with_all.items():
            torch.testing.assert_close(without[name], grad, rtol=1e-5, atol=1e-6, msg=name)
    assert skipped["loss"] == pytest.approx(full["loss"], abs=1e-6)
    if "kl" in case:  # measured over every sequence either way
        assert skipped["kl"] == pytest.approx(full["kl"], rel=1e-5)


def test_kl_in_the_loss_skips_nothing_and_says_so():
    algo = AlgorithmConfig(kl={"beta": 0.1, "estimator": "k3", "target": "loss"})
    stats, backend = run_update(algo, skip=True)
    assert stats["skipped_seqs"] == 0 and stats["skip_blocked_by_kl"] == 1.0
    assert backend.backwards == 4  # 8 sequences, micro-batches of 2


class AdamWBackend(SGDBackend):
    """The same optimizer side with torch's AdamW: a zero gradient still moves its weights (momentum)."""

    def __init__(self, model):
        super().__init__(model)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)

    def step(self) -> float:
        self.records.append((self.lr, {}))
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=False)  # a later step sees zeros, not None
        return 0.0


def zero_variance_rollout() -> Rollout:
    rollout = skip_rollout()
    rollout.rewards = [1.0] * 8  # every group without variance
    return rollout


@pytest.mark.parametrize("skip", [True, False])
def test_a_step_with_nothing_to_train_leaves_the_weights_as_they_are(skip):
    """After a step with gradient, a step whose every group has one reward: with skipping, no
    forward and no optimizer step (the weights stay); without, AdamW steps on a zero gradient and
    its momentum moves the weights again."""
    policy, _ = ref.tiny_models()
    backend = AdamWBackend(policy)
    learner = Learner(backend, AlgorithmConfig(), micro_batch_size=2, temperature=1.0, pad_id=ref.PAD,
                      device=torch.device("cpu"), share_prompts=True, skip_zero_advantage=skip)
    first = learner.update(skip_rollout(), lr=1e-3).sums
    assert first["optimizer_steps"] == 1.0
    before = [p.detach().clone() for p in policy.parameters()]
    backwards = backend.backwards
    stats = learner.update(zero_variance_rollout(), lr=1e-3).sums
    moved = max(float((p.detach() - b).abs().max()) for p, b in zip(policy.parameters(), before))
    assert stats["zero_variance"] == 2 and stats["loss"] == 0.0
    if skip:
        assert stats["optimizer_steps"] == 0.0 and stats["tokens"] == 0.0 and stats["skipped_seqs"] == 8 and stats["forward_tokens"] == 0.0
        assert backend.backwards == backwards and len(backend.records) == 1
        assert moved == 0.0
    else:
        assert stats["optimizer_steps"] == 1.0 and len(backend.records) == 2
        assert moved > 1e-4  # about 2/3 of the first step's lr-sized move, with no new evidence


def test_no_rank_skips_the_optimizer_step_alone(monkeypatch):
    """Nothing to train here but something on another rank: this rank runs its null micro-batch
    and steps with the others (ZeRO's collectives stay aligned)."""
    import rlvr.training.learner as learner_module

    real = learner_module.reduce_sums
    monkeypatch.setattr(learner_module, "reduce_sums", lambda sums: {**real(sums), "trained_seqs": 3.0})
    stats, backend = run_update(AlgorithmConfig(), skip=True, rollout=zero_variance_rollout())
    assert stats["skipped_seqs"] == 8 and stats["optimizer_steps"] == 1.0
    assert backend.backwards == 1 and len(backend.records) == 1
    assert all(float(g.abs().max()) == 0.0 for g in backend.records[0][1].values())


def test_ranks_run_the_same_number_of_micro_batches(monkeypatch):
    """Another rank with more to train raises the micro-batch count: this rank pads with null
    micro-batches, and its gradient is unchanged."""
    import rlvr.training.learner as learner_module

    algo = AlgorithmConfig(ppo_epochs=2)
    _, alone = run_update(algo, skip=True)
    real = learner_module.reduce_sums
    monkeypatch.setattr(learner_module, "reduce_sums", lambda sums: {**real(sums), "micro_batches_max": 4.0})
    _, padded = run_update(algo, skip=True)
    assert padded.backwards == 2 * 4 > alone.backwards
    for (_, a), (_, b) in zip(alone.records, padded.records):
        for name, grad in a.items():
            torch.testing.assert_close(b[name], grad, rtol=1e-6, atol=1e-7, msg=name)


def test_cpu_autocast_computes_in_bfloat16_keeps_float32_weights_and_a_float32_head():
    """model.dtype: bfloat16 on CPU (auto, where the CPU has bf16 instructions): the forward/backward under bf16 autocast, weights, gradients
    and the chunked output head in float32. The gradient is the float32 one up to bfloat16's
    rounding, not equal to it; the log-probs too."""
    from rlvr.kit.device import DevicePolicy

    def cpu_autocast(dtype, cuda, bf16_supported):
        return DevicePolicy(cuda=cuda, cuda_rules=cuda, bf16=bf16_supported).autocast(dtype)

    # bfloat16 on CPU, or auto on a CPU with bf16 instructions; never float32, never on a GPU
    assert cpu_autocast("bfloat16", cuda=False, bf16_supported=False)
    assert cpu_autocast("auto", cuda=False, bf16_supported=True)
    assert not cpu_autocast("auto", cuda=False, bf16_supported=False)
    assert not cpu_autocast("float32", cuda=False, bf16_supported=True)
    assert not cpu_autocast("bfloat16", cuda=True, bf16_supported=True)
    assert not DevicePolicy(cuda=False, cuda_rules=True, bf16=True).autocast("bfloat16")  # as on CUDA

    def update(autocast: bool):
        policy, _ = ref.tiny_models()
        backend = SGDBackend(policy)
        learner = Learner(backend, AlgorithmConfig(), micro_batch_size=2, temperature=1.0, pad_id=ref.PAD,
                          device=torch.device("cpu"), share_prompts=True, cpu_autocast=autocast)
        rollout = skip_rollout()
        with torch.no_grad():
            logp, mask, _ = learner.logprobs(policy, rollout.prompt_ids[:2], [c.token_ids for c in rollout.completions[:2]])
        assert learner._head_makes_logits[id(policy)]  # the head check held under autocast: no fallback
        learner.update(rollout, lr=ref.SGD_LR)
        return logp, mask, backend.records[0][1], policy

    logp32, mask, grads32, _ = update(False)
    logp16, _, grads16, policy = update(True)
    assert logp16.dtype == torch.float32 and all(p.dtype == torch.float32 for p in policy.parameters())
    gap = ((logp16 - logp32) * mask).abs().max().item()
    assert 0 < gap < 0.05, gap  # rounded, not equal
    flat32 = torch.cat([g.flatten() for g in grads32.values()])
    flat16 = torch.cat([grads16[n].flatten() for n in grads32])
    assert flat16.dtype == torch.float32 and not torch.equal(flat16, flat32)
    cosine = torch.nn.functional.cosine_similarity(flat16, flat32, dim=0).item()
    assert cosine > 0.99, cosine


def test_the_update_returns_what_the_report_needs():
    """``Learner.update`` returns an ``Update``: this rank's sums for the step's row, the last optimizer
    step's grad norm and each sequence's advantage (what samples.jsonl shows); nothing is left on
    the learner for the engine to read."""
    from rlvr.training.algo import rloo_advantages
    from rlvr.training.learner import Update

    policy, _ = ref.tiny_models()
    backend = SGDBackend(policy)
    learner = Learner(backend, AlgorithmConfig(ppo_epochs=2), micro_batch_size=ref.MICRO, temperature=1.0,
                      pad_id=ref.PAD, device=torch.device("cpu"), share_prompts=True)
    rollout = skip_rollout()
    update = learner.update(rollout, lr=ref.SGD_LR)
    assert isinstance(update, Update) and "grad_norm" not in update.sums and update.sums["optimizer_steps"] == 2.0
    last_grads = list(backend.records[-1][1].values())
    assert update.grad_norm == pytest.approx(float(torch.nn.utils.get_total_norm(last_grads))) and update.grad_norm > 0
    assert update.advantages == rloo_advantages(rollout.rewards, rollout.group_size, "none")[0]
    assert vars(learner).keys().isdisjoint({"last_advantages", "grad_norm"})
