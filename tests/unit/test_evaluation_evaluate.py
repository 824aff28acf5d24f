"""`rlvr eval`: the estimators, and end-to-end reports from local data with a tiny model."""

import pytest

from rlvr.evaluation.evaluate import majority_correct, pass_at_k


def test_pass_at_k_matches_the_definition():
    # 1 - C(n-c, k) / C(n, k), checked against the closed form by hand
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # C(3,2)/C(4,2)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)  # C(7,5)/C(10,5)
    assert pass_at_k(5, 4, 2) == 1.0  # fewer than k failures: some pair always passes
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 4)


def test_majority_vote():
    assert majority_correct(["3", "4", "3"], [True, False, True])
    assert not majority_correct(["4", "4", "3"], [False, False, True])
    assert majority_correct(["4", "3"], [False, True]) is False  # tie: the first seen wins
    assert not majority_correct([None, None], [False, False])


def test_eval_seed_draws_the_samples_and_is_reported():
    """``eval.seed`` (plus the rank) seeds the sampler, and the report says which seed drew it:
    `rlvr compare` refuses to pool two evaluations drawn with the same one."""
    from types import SimpleNamespace

    from rlvr.evaluation.evaluate import evaluate_with
    from rlvr.host.registry import RewardSpec
    from rlvr.recipe.spec import EvalConfig, Recipe
    from rlvr.rewards.runner import BoundReward
    from rlvr.sampling.prompts import Prompt
    from rlvr.sampling.samplers import prompt_seed

    class Recording:
        def __init__(self):
            self.seeds = []

        def generate(self, prompt_ids, *, n, seed=None, **options):
            self.seeds.append(seed)
            self.progress = options.get("progress")
            return [[SimpleNamespace(text=str(seed), token_ids=[1]) for _ in range(n)] for _ in prompt_ids]

    def says_seven(prompts, completions, completion_ids):
        return [float(c == "7") for c in completions]

    rows = [{"question": "a"}, {"question": "b"}, {"question": "c"}]
    prompts = [Prompt([i + 1], r["question"]) for i, r in enumerate(rows)]
    spec = RewardSpec("seven", says_seven, "", "test", "0", (), (), {}, False)
    recipe = Recipe.model_validate({"name": "t", "task": "arithmetic", "prompt": {"template": "{{question}}"},
                                    "rewards": {"seven": 1.0}, "eval": {"k": [2], "temperature": 1.0, "seed": 5}})
    for rank, accuracy in [(0, 0.0), (2, 1.0)]:
        sampler = Recording()
        result, _ = evaluate_with(recipe, [BoundReward(spec)], sampler, SimpleNamespace(rows=rows, prompts=prompts,
                                  dropped=0), rank=rank, world=3)
        assert sampler.seeds == [5 + rank] and result["seed"] == 5 and result["accuracy"] == accuracy
        assert sampler.progress is None  # asked for by `rlvr eval` and `rlvr pool` only
    evaluate_with(recipe, [BoundReward(spec)], sampler, SimpleNamespace(rows=rows, prompts=prompts, dropped=0),
                  progress_label="eval")
    assert sampler.progress.what == "eval" and sampler.progress.total == 3 * 2
    assert EvalConfig().seed == 12345  # the seed every evaluation had before it could be set
    # each prompt draws from its own stream: another seed moves every prompt's stream
    assert len({prompt_seed(s, i) for s in (1, 2, 12345) for i in range(50)}) == 150
    # vLLM's sample j of a request seeded x draws from x + j: no prompt's samples share a stream
    streams = [prompt_seed(7, i) + j for i in range(64) for j in range(16)]
    assert len(set(streams)) == len(streams)


def test_an_evaluation_reports_the_rewards_own_metrics_as_a_step_does():
    """``Score.metrics`` of an evaluation's samples: ``reward/<reward>/<key>`` in its result (so in
    report.json and eval.jsonl), aggregated as in metrics.jsonl."""
    from types import SimpleNamespace

    from rlvr import Score
    from rlvr.evaluation.evaluate import evaluate_with
    from rlvr.host.registry import RewardSpec
    from rlvr.recipe.spec import Recipe
    from rlvr.rewards.runner import BoundReward
    from rlvr.sampling.prompts import Prompt

    class Echo:
        def generate(self, prompt_ids, *, n, **options):
            return [[SimpleNamespace(text=str(p[0] * 10 + j), token_ids=[1]) for j in range(n)] for p in prompt_ids]

    def judged(prompts, completions, completion_ids):
        return [Score(1.0, {}, {"requests": 1, "seconds_mean": int(c) / 10, "seconds_max": int(c) / 10})
                for c in completions]

    rows = [{"question": "a"}, {"question": "b"}]
    prompts = [Prompt([i + 1], r["question"]) for i, r in enumerate(rows)]
    recipe = Recipe.model_validate({"name": "t", "task": "arithmetic", "prompt": {"template": "{{question}}"},
                                    "rewards": {"judged": 1.0}, "eval": {"k": [2], "temperature": 1.0}})
    spec = RewardSpec("judged", judged, "", "test", "0", (), (), {}, False)
    result, _ = evaluate_with(recipe, [BoundReward(spec)], Echo(), SimpleNamespace(rows=rows, prompts=prompts,
                              dropped=0))
    assert result["reward/judged/requests"] == 4.0 and result["reward/judged/seconds_max"] == 2.1
    assert result["reward/judged/seconds_mean"] == pytest.approx((1.0 + 1.1 + 2.0 + 2.1) / 4)
    assert not any(k.startswith("reward_metric") for k in result)


def test_progress_lines_at_each_tenth_once_it_takes_a_while():
    import logging

    from rlvr.runs.logs import ProgressLog, duration, progress_line

    assert [duration(s) for s in (0, 44.6, 60, 220, 3600, 3900)] == ["0 s", "45 s", "1 min 0 s", "3 min 40 s",
                                                                       "1 h 0 min", "1 h 5 min"]
    assert progress_line("eval", 2112, 10552, 450) == "eval: 2112 of 10552 samples (20%) in 7 min 30 s, about 30 min left"
    assert progress_line("pool", 0, 8, 3) == "pool: 0 of 8 samples (0%) in 3 s"
    assert progress_line("pool", 4, 8, 40) == "pool: 4 of 8 samples (50%) in 40 s, about 40 s left"
    assert progress_line("pool", 1, 8, 4000).endswith("in 1 h 6 min, about 7 h 46 min left")

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__()
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    logger, lines, now = logging.getLogger("test.progress"), Lines(), [0.0]
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    report = ProgressLog("eval", 100, logger, quiet_s=30, clock=lambda: now[0])
    for done, at in [(8, 5), (16, 20), (24, 40), (26, 45), (35, 50), (80, 100), (99, 110), (100, 111)]:
        now[0] = at
        report(done)
    # before 30 s nothing; then one line per tenth newly reached (20%, 30%, 80%, 90%); none at the end
    assert lines.lines == [progress_line("eval", 24, 100, 40), progress_line("eval", 35, 100, 50),
                           progress_line("eval", 80, 100, 100), progress_line("eval", 99, 100, 110)]
    quick = ProgressLog("eval", 10, logger, clock=lambda: 0.0)
    for done in range(11):
        quick(done)
    assert len(lines.lines) == 4  # a sampling that takes seconds says nothing


def test_vllm_and_server_samplers_count_finished_samples(capsys):
    """vLLM's ``use_tqdm`` gets a bar that draws nothing and counts; the server client counts
    each prompt's ``n`` as its request returns."""
    from rlvr.sampling.samplers import counting_bar
    from rlvr.sampling.server import ServerSampler

    seen = []
    bar = counting_bar(seen.append)(total=3, desc="Processed prompts", dynamic_ncols=True, postfix="x")
    bar.update(2)  # as vLLM 0.32's _run_engine: each finished prompt's n, the postfix from the elapsed time
    bar.postfix = f"{2 / max(bar.format_dict['elapsed'], 1e-9):.2f} toks/s"
    bar.update(2)
    bar.close()
    assert seen == [2, 4]
    assert capsys.readouterr() == ("", "")

    sampler = ServerSampler(["http://127.0.0.1:9"], secret="s", rank=1, world=2, timeout_s=1, bucket_bytes=1 << 20)
    sampler._post = lambda url, path, body: {"choices": [{"index": i, "text": "t", "token_ids": [1],
                                                          "finish_reason": "stop"} for i in range(body["n"])]}
    counted = []
    groups = sampler.generate([[1], [2], [3]], n=2, temperature=1.0, top_p=1.0, max_tokens=4, seed=0,
                              progress=counted.append)
    assert [len(g) for g in groups] == [2, 2, 2] and counted == [2, 4, 6]
