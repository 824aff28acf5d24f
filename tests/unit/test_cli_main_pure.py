"""The `rlvr` command: the checks that need no process, socket or model (the unit ring; the others:
tests/e2e/test_cli_main.py, tests/integration/test_cli_main_live.py)."""

import pytest


def test_read_jsonl_reports_bad_bytes_and_files_by_line(tmp_path):
    import gzip

    from rlvr import RlvrError
    from rlvr.kit.data import read_jsonl

    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n{"a": 2}\n')
    assert list(read_jsonl(bom)) == [{"a": 1}, {"a": 2}]
    packed = tmp_path / "x.jsonl.gz"
    packed.write_bytes(gzip.compress(b'{"a": 1}\n{"a": "\xff"}\n'))
    with pytest.raises(RlvrError, match=r"x.jsonl.gz:2: not UTF-8 text \(byte 0xff at column 8\)"):
        list(read_jsonl(packed))
    fake = tmp_path / "fake.jsonl.gz"
    fake.write_text('{"a": 1}\n')
    with pytest.raises(RlvrError, match="fake.jsonl.gz: cannot read: Not a gzipped file"):
        list(read_jsonl(fake))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(b'{"a": 1}\n' * 1000)[:-20])
    with pytest.raises(RlvrError, match="cut.jsonl.gz: cannot read"):
        list(read_jsonl(cut))
    with pytest.raises(RlvrError, match="cannot read: Is a directory"):
        list(read_jsonl(tmp_path))


def test_the_help_says_what_an_output_that_is_a_link_gets():
    """What `rlvr score --help` says of links is what it does (tests/e2e/test_cli_main.py:
    test_score_refuses_a_symlink_and_keeps_modes): a symlink is refused, never written through."""
    from click.testing import CliRunner

    from rlvr.cli.main import cli

    text = " ".join(CliRunner().invoke(cli, ["score", "--help"]).output.split())
    assert "a symlink is refused (name the file it points to)" in text
    assert "written through" not in text
