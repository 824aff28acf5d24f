"""Programs that signal their own process group, or every process they may signal, and programs
whose output carries control characters: the checks that need no process, socket or model (the unit
ring; the others: tests/integration/test_plugins_sandbox_signals.py)."""

from __future__ import annotations

import logging

import pytest
from rlvr_plugins import sandbox as sb
from rlvr_plugins.sandbox import pool as sb_pool


@pytest.mark.parametrize("raw, shown", [
    ("plain text\twith tab\nand newline", "plain text\twith tab\nand newline"),
    ("\x00", "\\x00"),
    ("\x1b[2J\x1b]0;title\x07", "\\x1b[2J\\x1b]0;title\\x07"),
    ("line\r\nnext\r\n", "line\nnext\n"),
    ("progress 10%\rprogress 99%", "progress 10%\\rprogress 99%"),
    ("\r", "\\r"),
    ("\x7f\x80\x85\x9b\x9f", "\\x7f\\x80\\x85\\x9b\\x9f"),
    ("\x0b\x0c\x1f", "\\x0b\\x0c\\x1f"),
    ("é ü 中 \xa0 \\x41", "é ü 中 \xa0 \\x41"),  # printable and non-ASCII text stays
    ("\u2028\u202e\u200b", "\\u2028\\u202e\\u200b"),  # and invisible format characters do not (rlvr.kit)
    ("", ""),
])
def test_escape_controls(raw, shown):
    assert sb.escape_controls(raw) == shown


def test_escape_controls_leaves_no_control_character():
    every = "".join(map(chr, range(0x00, 0x100)))
    escaped = sb.escape_controls(every)
    assert not [c for c in escaped if (ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) <= 0x9F]
    assert sb.escape_controls(escaped) == escaped  # nothing left to escape


def test_process_isolation_logs_one_warning(caplog):
    sb_pool._warn_weak_isolation.cache_clear()
    with caplog.at_level(logging.WARNING, logger="rlvr.sandbox"):
        for _ in range(3):
            sb.Sandbox("process", workers=1).close()  # no worker starts: choosing the level is enough
    warnings = [r for r in caplog.records if r.name == "rlvr.sandbox" and r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    text = warnings[0].getMessage()
    for needle in ("isolation 'process'", "/etc/passwd", "network", "kill(-1)", "isolation 'bwrap'"):
        assert needle in text, text


def test_process_isolation_warning_says_what_is_open_for_each_setup():
    as_root = sb_pool._process_isolation_warning(True, True)
    assert "its worker only" in as_root and "killed after each run" in as_root
    not_root = sb_pool._process_isolation_warning(False, False)
    assert "this trainer included" in not_root and "can outlive the run" in not_root
