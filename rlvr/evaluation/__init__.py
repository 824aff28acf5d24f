"""``rlvr eval``: sample a recipe's eval split and report pass@k, majority and per-reward figures.

``evaluate`` splits prompts over ranks, samples with the recipe's sampler, scores with its rewards
and writes the report and samples; training calls it for its held-out checks.

Design notes: docs/evaluation.md.

May import: rlvr, rlvr.kit, rlvr.host, rlvr.recipe, rlvr.models, rlvr.rewards, rlvr.runs, rlvr.sampling.
"""
