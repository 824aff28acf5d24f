"""rlvr's built-in plugins. Each module is registered through the project's own ``rlvr``
entry points, exactly like a third-party plugin."""
