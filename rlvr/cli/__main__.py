"""``python -m rlvr.cli``: the ``rlvr`` command."""

from rlvr.cli.main import main

main()
