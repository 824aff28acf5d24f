"""``rlvr eval``: sample a recipe's eval split and report pass@k, majority and per-reward figures.

``evaluate`` splits prompts over ranks, samples and scores them (``rlvr.rewards.scored``, the path
training's rollouts take too) and writes the report and samples; ``held_out.Evaluator`` runs it on
the trainer's sampler during training (before, every ``trainer.eval_every`` steps, after) and pairs
each result with the one before; ``compare`` holds the paired statistics.

Design notes: docs/evaluation.md.

May import: rlvr, rlvr.kit, rlvr.host, rlvr.recipe, rlvr.models, rlvr.rewards, rlvr.runs, rlvr.sampling.
"""
