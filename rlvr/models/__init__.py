"""Models and the processes that run them, as sampling, evaluation and training share them.

``hub`` resolves a model name (alias, hub id, local folder) and pulls models (GGUF included),
``tokens`` pads token batches and finds a model's end-of-sequence ids, ``distributed`` scopes a
torch.distributed process group to a run and sums named figures over its ranks (``reduce_sums``),
``lora`` merges LoRA adapters into their base weights for sampling and restores the base weights
exactly, or merges them one weight at a time for a sync, ``memory`` copies weights out of a
mapped safetensors file so that its pages go.

Design notes: docs/sampling.md and docs/training.md.

May import: rlvr, rlvr.kit.
"""
