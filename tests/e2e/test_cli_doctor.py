"""``rlvr doctor``: the report a bug report needs, on this machine; ``--smoke``'s cases each in a
process of its own, pass or fail with the reason; and benchmarks/gpu_check.py end to end with
``--cpu`` (the script the lent GPU machines run)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import ROOT, one_line_error, run_rlvr


def test_the_report_names_versions_devices_decisions_and_backends():
    out = run_rlvr("doctor", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    for needle in ("torch ", "transformers", "deepspeed", "peft", "CUDA available: False", "device policy: cpu",
                   "model.dtype auto -> trains in", "deepspeed ops built:", "sampler backends: vllm"):
        assert needle in text, (needle, text)
    found = json.loads(run_rlvr("doctor", "--json", timeout=300).stdout)
    assert found["gpus"] == [] and found["decisions"]["device"] == "cpu"
    assert found["decisions"]["dist_backend"] == "gloo" and "cpu_adam" in found["deepspeed_ops"]


def test_the_report_follows_the_rules_asked_for():
    found = json.loads(run_rlvr("doctor", "--json", env={"RLVR_DEVICE_POLICY": "cuda"}, timeout=300).stdout)
    d = found["decisions"]
    assert (d["cuda_rules"], d["weights_dtype"], d["autocast"], d["deepspeed_bf16"]) == (True, "bfloat16", False, True)


@pytest.mark.parametrize("args, message", [
    (["--smoke", "--case", "hf-bogus"], "--case 'hf-bogus': one of hf-full, hf-lora"),
    (["--case", "hf-full"], "--case and --work-dir go with --smoke"),
])
def test_bad_options_are_one_line(args, message):
    one_line_error(run_rlvr("doctor", *args, timeout=300), message)


def test_bad_rules_are_one_line():
    one_line_error(run_rlvr("doctor", env={"RLVR_DEVICE_POLICY": "gpu"}, timeout=300),
                   "RLVR_DEVICE_POLICY='gpu': one of auto, cuda, cpu")


def test_smoke_passes_and_a_failing_case_says_why(tmp_path):
    """hf-full trains here and passes; hf-lora given 1 s fails with its reason, and the command
    exits 1; a work folder that exists is refused in one line."""
    out = run_rlvr("doctor", "--smoke", "--case", "hf-full", "--work-dir", tmp_path / "w", timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "smoke hf-full" in out.stdout and "pass" in out.stdout.split("smoke hf-full")[1]
    assert json.loads((tmp_path / "w" / "hf-full" / "run" / "summary.json").read_text()) is not None
    out = run_rlvr("doctor", "--smoke", "--case", "hf-lora", "--timeout", "1", "--work-dir", tmp_path / "v",
                   timeout=600)
    assert out.returncode == 1
    assert "FAIL: over 1 s (log: " in out.stdout
    one_line_error(run_rlvr("doctor", "--smoke", "--work-dir", tmp_path / "v", timeout=300), "exists: name a new folder")


def test_a_failed_case_reports_its_own_error_line(tmp_path):
    """A case whose training raises: the child's last error line is the reason."""
    from rlvr.training.smoke import _child

    result = _child("hf-full", tmp_path, tmp_path / "no-such-model", None, timeout_s=300)
    assert not result.ok and "no model folder at" in result.reason and "log:" in result.reason


@pytest.mark.longer(600, reason="every part of the GPU check on the CPU: trainings, samplers, LoRA (80 s alone)")
def test_gpu_check_runs_end_to_end_on_the_cpu(tmp_path):
    """benchmarks/gpu_check.py --cpu: rlvr and TRL on the same tiny shapes, each part's figures
    in gpu_check.json and a table in gpu_check.md, and the ratio line."""
    pytest.importorskip("trl")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--cpu", "--out", str(tmp_path / "o"),
                          "--only", "rlvr-full,rlvr-static,trl,doctor", "--budget", "500"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    found = json.loads((tmp_path / "o" / "gpu_check.json").read_text())
    for part in ("rlvr-full", "rlvr-static", "trl"):
        assert found[part]["ok"] and len(found[part]["step_s"]) == 2 and len(found[part]["generate_s"]) == 2
    assert all(g > 0 for g in found["rlvr-full"]["grad_norm"])
    assert [s["case"] for s in found["doctor"]["smoke"]] == ["hf-full"] and found["doctor"]["smoke"][0]["ok"]
    table = (tmp_path / "o" / "gpu_check.md").read_text()
    assert "| rlvr-full | yes |" in table and "rlvr's step / TRL's (rlvr-static):" in table
    again = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--cpu", "--out",
                            str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "is not empty" in again.stderr
