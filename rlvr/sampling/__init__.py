"""Sampling: prompts in, scored-to-be completions out, colocated or from sampler servers.

``prompts`` renders a task's rows into token ids, ``samplers`` holds the samplers (vLLM in-process,
Hugging Face generate) behind one ``Sampler`` Protocol, ``server`` starts and talks to vLLM in
processes of its own (``auth``: the run's secret), ``transfer`` moves the trainer's weights into
vLLM in buckets (the wire format, the trainer's sender, the receiver inside vLLM, and one module
per transport), ``episodes`` runs multi-turn environments turn by turn.

Design notes: docs/sampling.md.

May import: rlvr, rlvr.kit, rlvr.host, rlvr.recipe, rlvr.models.
"""
