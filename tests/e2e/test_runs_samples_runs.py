"""Training samples: the checks that run `rlvr` or other processes end to end (the e2e ring; the
others: tests/unit/test_runs_samples.py)."""

from __future__ import annotations

from rlvr.runs.samples import SamplesLog
from rlvr.training.report import sample_records
from helpers.runs_samples import decode, rollout



def test_the_samples_command(tmp_path):
    from helpers import run_rlvr

    missing = run_rlvr("samples", tmp_path)
    assert missing.returncode == 2 and "no samples (a run writes them every trainer.samples_every steps)" in \
        missing.stderr and len(missing.stderr.strip().splitlines()) == 1
    log = SamplesLog(tmp_path / "samples.jsonl", every=2, groups=2, enabled=True)
    for step in (2, 4):
        log.write(sample_records(step, rollout(), [0.6, 0.0, -1.2, 1.2], decode, groups=2))
    last = run_rlvr("samples", tmp_path, "--limit", "1")
    assert last.returncode == 0 and last.stdout.startswith("=== step 4, group 0") and "sample 1" not in last.stdout
    group = run_rlvr("samples", tmp_path, "--step", "2", "--group", "1")
    assert group.returncode == 0 and "=== step 2, group 1" in group.stdout and "group 0" not in group.stdout
    absent = run_rlvr("samples", tmp_path, "--step", "3")
    assert absent.returncode == 2 and "no samples of step 3; steps with samples: 2, 4" in absent.stderr
