"""The plugin host: what a plugin implements and how rlvr finds it.

Owns the hook specs (``rlvr_register_rewards``/``_tasks``/``_environments`` and the callbacks'
signatures), the environment Protocol (its ``Reply`` is the hook API's, in ``rlvr``), the
registry built from the ``rlvr`` entry points (one ``Spec`` per registered name, duplicates
refused naming both plugins), which code a recipe's ``module:function`` rewards may import
(``imports``), and the checking of plugin options against their annotations (did-you-mean,
ranges, choices).

Design notes: docs/host.md.

May import: rlvr, rlvr.kit.
"""
