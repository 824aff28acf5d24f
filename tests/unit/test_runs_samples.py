"""Training samples: an episode cut into turns by its token mask, the records written every N
steps, a resume dropping what it redoes, and the terminal view."""

from __future__ import annotations

import json

import pytest

from rlvr.runs.samples import SamplesLog, format_records, read_samples, turns
from rlvr.training.report import sample_records
from helpers.runs_samples import decode, rollout



def test_turns_follow_the_mask():
    ids, mask = [1, 2, 3, 4, 5], [1, 1, 0, 0, 1]
    assert turns(decode(ids), ids, mask, decode) == [
        {"role": "policy", "text": "Let me run.\n```python\nprint(6*7)\n```\n", "trained": True},
        {"role": "environment", "text": "```output\n42\n```\n", "trained": False},
        {"role": "policy", "text": "42", "trained": True}]
    assert turns("plain", [5], None, decode) == [{"role": "policy", "text": "plain", "trained": True}]
    assert turns("", [], [], decode) == []


def test_records_of_the_first_groups_with_rewards_reasons_and_advantages():
    records = sample_records(4, rollout(), [0.6, 0.0, -1.2, 1.2], decode, groups=1)
    assert len(records) == 2 and {r["group"] for r in records} == {0}
    first, second = records
    assert (first["step"], first["sample"], first["prompt"], first["total"], first["advantage"]) == (4, 0, "Q?", 1.2, 0.6)
    assert [t["role"] for t in first["turns"]] == ["policy", "environment", "policy"]
    assert first["rewards"] == {"math": 1.0, "tool_call": 1} and first["reasons"] == {"math": {"why": "equal"}}
    assert second["total"] is None and second["truncated"] and second["reasons"] == {}
    json.dumps(records)  # plain JSON
    assert sample_records(4, rollout(), None, decode, groups=5)[3]["advantage"] is None


def test_samples_log_writes_every_n_steps_and_a_resume_drops_what_it_redoes(tmp_path):
    log = SamplesLog(tmp_path / "samples.jsonl", every=2, groups=1, enabled=True)
    assert [s for s in range(1, 7) if log.due(s)] == [2, 4, 6]
    short = SamplesLog(tmp_path / "short.jsonl", every=4, groups=1, enabled=True, last=3)
    assert [s for s in range(1, 4) if short.due(s)] == [3]  # a run shorter than samples_every: its last step
    assert [s for s in range(1, 8) if SamplesLog(tmp_path / "x", every=4, groups=1, enabled=True, last=7).due(s)] == [4, 7]
    for step in (2, 4, 6):
        log.write(sample_records(step, rollout(), None, decode, groups=1))
    with open(log.path, "a") as f:
        f.write('{"step": 8, "gro')  # a kill mid-write
    log.truncate_to(4)
    assert [r["step"] for r in read_samples(log.path)] == [2, 2, 4, 4]
    off = SamplesLog(tmp_path / "off.jsonl", every=0, groups=1, enabled=True)
    assert not off.due(2) and (off.write([{"step": 2}]) is None) and not off.path.exists()
    assert not SamplesLog(tmp_path / "r1.jsonl", every=1, groups=1, enabled=False).due(1)


def test_terminal_view_shows_turns_rewards_and_what_is_not_trained_on():
    text = format_records(sample_records(3, rollout(), [0.6, 0.0, -1.2, 1.2], decode, groups=1), width=80)
    assert text.startswith("=== step 3, group 0")
    assert "--- sample 0: total 1.200  (math 1.000  tool_call 1)  advantage +0.600" in text
    assert "  [environment, not trained on]\n    ```output\n    42\n    ```" in text
    assert "--- sample 1: total -  (math -  tool_call 0)  advantage +0.000  (truncated)" in text
    assert "  math: equal" in text


def test_what_the_model_wrote_reaches_the_terminal_shown_not_acted_on():
    """A completion holding terminal escapes (clear the screen, set the title, a bidi override):
    the view writes them out, as the console does elsewhere."""
    records = [{"step": 1, "group": 0, "sample": 0, "prompt": "Q\x1b]0;pwned\x07", "total": 1.0,
                "rewards": {"math\x1b[31m": 1.0}, "turns": [{"role": "policy", "trained": True,
                "text": "4\x1b[2J\x1b[H done\u202egnp.exe\x85next"}], "reasons": {"math": {"why": "ok\x1b[5m"}}}]
    text = format_records(records, width=80)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text and "\x85" not in text
    assert "4\\x1b[2J\\x1b[H done\\u202egnp.exe\\x85next" in text and "Q\\x1b]0;pwned\\x07" in text
    assert "math\\x1b[31m 1.000" in text and "math: ok\\x1b[5m" in text


def test_train_result_says_why_it_has_no_samples(tmp_path):
    from rlvr import RlvrError
    from rlvr.api.python import TrainResult

    result = TrainResult(tmp_path, {})
    with pytest.raises(RlvrError, match=r"holds no samples: the run wrote none \(trainer.samples_every: 0\)"):
        result.samples()
    (tmp_path / "samples.jsonl").write_text('{"step": 4, "group": 0}\n{"step": 6, "group": 0}\n')
    assert [r["step"] for r in result.samples()] == [4, 6] and result.samples(6) == [{"step": 6, "group": 0}]
    with pytest.raises(RlvrError, match=r"no samples of step 5 .* it has the samples of steps 4, 6"):
        result.samples(5)
