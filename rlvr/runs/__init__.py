"""What a run leaves behind: its folder, its log, its metrics and their curves.

``outputs`` writes files and folders without replacing what the user had (temporaries removed on
signals), ``logs`` splits console and ``train.log``, ``metrics`` sums a step's figures over ranks
and writes ``metrics.jsonl``, ``plotting`` draws ``curves.png``.

Design notes: docs/training.md.

May import: rlvr, rlvr.kit.
"""
