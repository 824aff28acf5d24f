"""What a run leaves behind: its folder, its log, its metrics and their curves.

``outputs`` writes files and folders without replacing what the user had (temporaries removed on
signals), ``logs`` splits console and ``train.log``, ``metrics`` turns a step's figures (named sums,
already added up over ranks) into its row and writes ``metrics.jsonl``, ``samples`` writes, reads and
shows ``samples.jsonl``, ``plotting`` draws ``curves.png``. Plain numbers and records in: nothing
here knows training's objects.

Design notes: docs/training.md.

May import: rlvr, rlvr.kit.
"""
