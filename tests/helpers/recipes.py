"""The smallest valid recipe, which tests override field by field (tests/unit/test_recipe_load.py,
test_sampling_server_options.py, test_training_loss_variants.py)."""

BASE = """
name: t
task: {name: arithmetic, options: {size: 10}}
prompt: {template: "{{question}}"}
rewards: {math: 1.0}
sampling: {num_generations: 4}
trainer: {rollout_batch_size: 16, micro_batch_size: 4}
"""

