"""``sampling.hf_static_cache``: the HF sampler with transformers' static key/value cache and
prompts left-padded to a multiple of 64 tokens draws the very tokens the dynamic cache draws
(greedy, and sampled with one seed), so turning it on to compile a GPU's decoding changes no
sample; the recipe refuses it for another backend."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.models.tiny import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("static") / "m")
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("temperature, n", [(0.0, 1), (1.0, 3)])
def test_the_static_cache_draws_what_the_dynamic_one_draws(tiny, temperature, n):
    from rlvr.sampling.samplers import HFSampler

    model, tok = tiny
    prompts = [tok("What is 3 + 4?")["input_ids"], tok("Hi")["input_ids"], list(range(300, 370))]  # 70: two widths
    drawn = []
    for static in (False, True):
        sampler = HFSampler(lambda: model, tok, synced=False, static_cache=static)
        groups = sampler.generate(prompts, n=n, temperature=temperature, top_p=1.0, max_tokens=12, seed=7)
        drawn.append([[(c.token_ids, c.truncated, c.text) for c in g] for g in groups])
    assert drawn[0] == drawn[1]
    assert len(drawn[1]) == 3 and all(len(g) == n for g in drawn[1])
