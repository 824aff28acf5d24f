"""Training: the RLOO engine on DeepSpeed.

``engine.train`` is the loop (one screen); ``rollout`` produces scored groups of K samples (ahead of
the trainer in server mode), ``algo`` holds the list maths (leave-one-out advantages, length
shaping), ``losses`` the tensor maths (policy loss, clipping, KL, aggregation, importance weights),
``forward`` plans micro-batches and computes completion logits, ``learner`` turns a rollout into
optimizer steps, ``policy`` builds the DeepSpeed model and syncs weights to the sampler,
``checkpoint`` saves and resumes exactly (no pickles loaded).

Design notes: docs/training.md.

May import: rlvr, rlvr.kit, rlvr.host, rlvr.recipe, rlvr.models, rlvr.rewards, rlvr.runs, rlvr.sampling, rlvr.evaluation.
"""
