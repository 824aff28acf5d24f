"""Calling reward functions safely and combining them with weights; sampling and scoring in one path.

``runner`` binds a registered reward to a recipe's weight, options and column mapping, and scores a
batch: a reward that raises spoils only the records it could not score (``None``, counted and
logged), never the batch or the run. The rewards themselves are plugins (``plugins/``).
``scored`` is the one sample-and-score path training and evaluation share: K completions (or
episodes) for each prompt from the sampler they are handed, scored in one batch, an episode whose
environment failed left unscored; it is the only module here that knows samplers (sampling itself
never scores).

Design notes: docs/rewards.md, docs/training.md and docs/evaluation.md.

May import: rlvr, rlvr.kit, rlvr.host, rlvr.sampling.
"""
