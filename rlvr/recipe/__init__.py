"""Recipes: the YAML that names a task, a prompt, weighted rewards and the settings.

``spec`` is the schema (pydantic, strict: unknown keys and non-finite numbers refused), ``load``
reads YAML with profiles and ``--set`` overrides into a ``Recipe``, ``resolve`` checks a recipe
against the plugin host (names, columns, options, template fields) and reads a task's rows;
``template`` renders ``{{column}}`` prompts (and checks chat-message columns); ``foreign`` holds
TRL's and verl's names for rlvr's settings, for the hint an unknown key gets; ``rows`` checks every
row a command reads against the recipe, naming a bad row's file and line; ``loss_variants`` and
``sampler_backends`` declare, once each, the loss variants and the sampler backends a recipe may
choose (what each needs and can do), and the schema takes its choices from them. Nothing here
imports torch, vLLM or DeepSpeed: ``rlvr validate`` runs before any model loads.

Design notes: docs/host.md.

May import: rlvr, rlvr.kit, rlvr.host.
"""
