"""``rlvr.kit.escape_controls``: text from outside (a program's output, a reward's reason) shows
what it holds. Control characters, Unicode's invisible format characters (Cf: bidi overrides,
zero-width characters, tag characters) and line/paragraph separators (Zl, Zp) are written out;
letters of every script, emoji, newlines and tabs stay."""

import sys
import unicodedata

import pytest

from rlvr import Score
from rlvr.host.registry import RewardSpec, reward_signature
from rlvr.kit import escape_controls
from rlvr.rewards.runner import BoundReward, run_reward


@pytest.mark.parametrize("raw, shown", [
    ("\u202egnp.exe", "\\u202egnp.exe"),  # right-to-left override
    ("a\u2066b\u2069c\u200ed\u200f", "a\\u2066b\\u2069c\\u200ed\\u200f"),  # isolates, direction marks
    ("zero\u200bwidth\u200c\u2060\ufeff", "zero\\u200bwidth\\u200c\\u2060\\ufeff"),
    ("one\u2028two\u2029three", "one\\u2028two\\u2029three"),
    ("\U000e0001\U000e0041\U000e007f\U000e0000", "\\U000e0001\\U000e0041\\U000e007f\\U000e0000"),  # tags
    ("soft\xadhyphen", "soft\\xadhyphen"),
    ("\x00\x1b[31m\x7f\x85\r", "\\x00\\x1b[31m\\x7f\\x85\\r"),
    ("bad \udcff byte", "bad \\udcff byte"),  # a byte decoded with surrogateescape
])
def test_hidden_characters_are_written_out(raw, shown):
    assert escape_controls(raw) == shown


def test_ordinary_text_is_kept():
    text = "tabs\tand\nnewlines, École, straße, 中文, 日本語, Ελληνικά, עברית, العربية, हिन्दी, 😀👍🏽, \xa0, \\u200b"
    assert escape_controls(text) == text
    assert escape_controls("a\r\nb") == "a\nb"


def test_every_hidden_code_point_is_escaped_and_escaping_is_stable():
    hidden = [chr(c) for c in range(sys.maxunicode + 1)
              if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp") or 0xE0000 <= c <= 0xE007F]
    assert len(hidden) > 200
    kept = {"\t", "\n"}
    for char in hidden:
        shown = escape_controls(char)
        assert shown == char if char in kept else shown.startswith("\\") and shown.isascii(), repr(char)
    once = escape_controls("".join(hidden))
    assert escape_controls(once) == once


def reasons(prompts, completions, completion_ids):
    return [Score(0.0, {"why": "output was \u202eevil\u200b", "checks": [{"\u2028key": "tag\U000e0041"}], "n": 3})
            for _ in completions]


def crashes(prompts, completions, completion_ids):
    raise ValueError("program printed \u202e\x1b[2J")


def bound(fn):
    columns, optional, opts, any_, convention = reward_signature(fn)
    return BoundReward(RewardSpec(fn.__name__, fn, "", "test", "0", columns, optional, opts, any_,
                                  convention=convention), 1.0, {})


def test_reward_reasons_and_errors_are_escaped():
    run = run_reward(bound(reasons), ["p"], ["c"], [None], [{}])
    assert run.infos == [{"why": "output was \\u202eevil\\u200b", "checks": [{"\\u2028key": "tag\\U000e0041"}], "n": 3}]
    for n in (1, 2):  # one record alone, and a batch retried record by record
        run = run_reward(bound(crashes), ["p"] * n, ["c"] * n, [None] * n, [{}] * n)
        assert run.values == [None] * n
        assert run.failed[0] == "ValueError: program printed \\u202e\\x1b[2J" == run.infos[0]["error"]
