"""The ``rlvr`` command (``main``): every subcommand, one-line errors with exit status 2.

Light at import: torch, vLLM and DeepSpeed load only inside the commands that need them.

Design notes: README.md (the commands) and docs/.

May import: rlvr, rlvr.kit, rlvr.host, rlvr.recipe, rlvr.models, rlvr.rewards, rlvr.runs, rlvr.sampling, rlvr.evaluation, rlvr.training.
"""
