"""Training: the RLOO engine on DeepSpeed.

``engine.train`` is the loop (one screen); ``rollout`` produces scored groups of K samples (ahead of
the trainer in server mode; the sampling and scoring is ``rlvr.rewards.scored``'s), ``algo`` holds
the list maths (leave-one-out advantages, length shaping), ``losses`` the tensor maths (policy loss,
clipping, KL, aggregation, importance weights), ``forward`` plans micro-batches and computes
completion logits, ``learner`` turns a rollout into optimizer steps (its ``Update``: sums, grad
norm, advantages), ``report`` turns a step's rollout and update into its metrics row, console line
and samples, ``policy`` builds the DeepSpeed model and syncs weights to the sampler,
``checkpoint`` saves and resumes exactly (no pickles loaded).

Design notes: docs/training.md.

May import: rlvr, rlvr.kit, rlvr.host, rlvr.recipe, rlvr.models, rlvr.rewards, rlvr.runs, rlvr.sampling, rlvr.evaluation.
"""
