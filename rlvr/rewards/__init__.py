"""Calling reward functions safely and combining them with weights.

``runner`` binds a registered reward to a recipe's weight, options and column mapping, and scores a
batch: a reward that raises spoils only the records it could not score (``None``, counted and
logged), never the batch or the run. The rewards themselves are plugins (``plugins/``).

Design notes: docs/rewards.md.

May import: rlvr, rlvr.kit, rlvr.host.
"""
