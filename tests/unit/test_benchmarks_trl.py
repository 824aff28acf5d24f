"""benchmarks/bench_trl.py without training anything: the rlvr-server side's recipe, the
figures pooled per side, the verdicts against the targets, ``--only`` and the memory of a
process tree whose child left the session (as rlvr's sampler does)."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

from rlvr.recipe.spec import Recipe

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_trl.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_trl", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def args(**kw) -> argparse.Namespace:
    base = dict(k=4, max_tokens=16, seed=0, steps=3, prompts=2, micro=8, lr=1e-5, rounds=1, lora=0)
    return argparse.Namespace(**{**base, **kw})


def test_server_recipe_is_the_rlvr_recipe_plus_server_sampling(bench):
    plain, server = bench.rlvr_recipe(args(), "rlvr"), bench.rlvr_recipe(args(), "rlvr-server")
    assert Recipe.model_validate(plain).sampling.mode == "colocate"
    parsed = Recipe.model_validate(server)
    assert (parsed.sampling.mode, parsed.sampling.max_staleness) == ("server", 1)
    changed = {k: v for k, v in server["sampling"].items() if plain["sampling"].get(k) != v}
    assert changed == {"mode": "server", "max_staleness": 1}
    assert {k: v for k, v in server.items() if k not in ("sampling", "description")} == \
        {k: v for k, v in plain.items() if k not in ("sampling", "description")}


def test_bf16_side_is_the_rlvr_recipe_computing_in_bfloat16(bench):
    plain, bf16 = bench.rlvr_recipe(args(), "rlvr"), bench.rlvr_recipe(args(), "rlvr-bf16")
    changed = {k: v for k, v in bf16["sampling"].items() if plain["sampling"].get(k) != v}
    assert changed == {"dtype": "bfloat16"} and plain["sampling"]["dtype"] == "float32"
    assert (plain["model"]["dtype"], bf16["model"]["dtype"]) == ("float32", "bfloat16")
    assert {k: v for k, v in bf16.items() if k not in ("sampling", "model", "description")} == \
        {k: v for k, v in plain.items() if k not in ("sampling", "model", "description")}
    from rlvr.kit.device import DevicePolicy
    from rlvr.training.engine import _importance_sampling

    cpu = DevicePolicy(cuda=False, cuda_rules=False, bf16=False)
    assert cpu.autocast(Recipe.model_validate(bf16).model.dtype)
    # sampler and trainer in the same dtype: auto adds no weights on either side
    assert _importance_sampling(Recipe.model_validate(bf16), cpu)[0] == "none"
    assert _importance_sampling(Recipe.model_validate(plain), cpu)[0] == "none"


def run(step_s, **series):
    n = len(step_s)
    return {"startup_s": 5.0, "step_s": step_s, "generate_s": [1.0] * n, "reward": [0.0, 0.5, 1.0][:n],
            "completion_len": [4.0] * n, "peak_tree_rss_bytes": 3 * 2**30, "peak_tree_pss_bytes": 2**30,
            "max_process_rss_bytes": 2**30, "wall_s": 60.0, **series}


def rlvr_run(step_s, staleness, wait_samples, wait_weights, sync):
    return run(step_s, train_s=[2.0] * len(step_s), staleness=staleness, wait_samples_s=wait_samples,
               wait_weights_s=wait_weights, sync_s=sync, skipped=[0.9, 0.5, 0.25][:len(step_s)],
               padded=[0.3, 0.1, 0.2][:len(step_s)])


def test_summarize_pools_loop_figures_after_the_first_step(bench):
    runs = [rlvr_run([9.0, 4.0, 6.0], [0, 1, 1], [9.0, 1.0, 2.0], [0.0, 0.5, 0.5], [0.0, 0.2, 0.3]),
            rlvr_run([9.0, 5.0, 5.0], [0, 1, 1], [9.0, 0.0, 1.0], [0.0, 0.0, 1.0], [0.0, 0.1, 0.4])]
    s = bench.summarize(runs, "rlvr-server")
    assert s["steps_counted"] == 4 and s["step_s_median"] == 5.0
    assert s["wait_samples_fraction"] == pytest.approx(4.0 / 20.0)
    assert s["wait_weights_fraction"] == pytest.approx(2.0 / 20.0)
    assert s["sync_fraction"] == pytest.approx(1.0 / 20.0)
    assert (s["staleness_mean"], s["staleness_max"]) == (1.0, 1)
    assert s["skipped_mean"] == pytest.approx((0.5 + 0.25) / 2) and s["padded_mean"] == pytest.approx(0.15)
    assert s["train_fraction"] == pytest.approx(8.0 / 20.0)
    assert "staleness_mean" not in bench.summarize([run([30.0, 30.0, 30.0])], "trl")


def test_report_gives_each_rlvr_side_its_verdict_against_trl(bench, capsys):
    loop = dict(staleness=[0, 1, 1], wait_samples=[1.0] * 3, wait_weights=[0.0] * 3)
    summary = {
        "rlvr": bench.summarize([rlvr_run([12.0] * 3, sync=[1.5] * 3, **loop)], "rlvr"),  # 0.40x, sync 12.5%
        "rlvr-server": bench.summarize([rlvr_run([9.0] * 3, sync=[0.5] * 3, **loop)], "rlvr-server"),  # 0.30x
        "trl": bench.summarize([run([30.0] * 3)], "trl"),
    }
    verdicts = bench.report(summary, args())
    assert verdicts["rlvr"]["time_ratio"] == pytest.approx(0.4) and not verdicts["rlvr"]["time_ok"]
    assert not verdicts["rlvr"]["sync_ok"]
    assert verdicts["rlvr-server"]["time_ratio"] == pytest.approx(0.3) and verdicts["rlvr-server"]["time_ok"]
    assert verdicts["rlvr-server"]["sync_ok"] and verdicts["rlvr-server"]["reward_ok"]
    out = capsys.readouterr().out
    assert "time per step rlvr-server/TRL: 0.300x" in out and "(target <= 0.33x)" in out
    rows = [line for line in out.splitlines() if line.startswith("rlvr-server ") and "->" not in line]
    assert len(rows) == 2 and rows[1].split()[-4:] == ["11.1%", "0.0%", "1.00", "1"]  # a row in each table


def test_lora_puts_the_same_adapters_on_every_rlvr_side(bench):
    """``--lora R``: each rlvr side trains adapters of rank R, alpha 2R, no dropout, on every
    projection (TRL's side gets the same through its peft_config); without it, every weight."""
    for side in ("rlvr", "rlvr-bf16", "rlvr-server"):
        lora = Recipe.model_validate(bench.rlvr_recipe(args(lora=16), side)).model.lora
        assert (lora.r, lora.alpha, lora.dropout, lora.target_modules) == (16, 32, 0.0, bench.LORA_TARGETS)
        assert Recipe.model_validate(bench.rlvr_recipe(args(), side)).model.lora is None
