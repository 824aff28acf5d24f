"""The Python API: ``from rlvr.api import train, evaluate``, from a script or a notebook, with
plain callables as rewards (rlvr's convention or TRL's) and plain rows as tasks, no package
needed; each returns a result object (the final model's folder, the summary, the metrics).
``RewardScorer`` scores records with one reward, as ``rlvr score`` does.

Design notes: README.md ("From Python") and docs/host.md.

May import: rlvr, rlvr.kit, rlvr.host, rlvr.recipe, rlvr.models, rlvr.rewards, rlvr.runs, rlvr.sampling, rlvr.evaluation, rlvr.training.
"""

from rlvr.api.python import EvalResult, TrainResult, evaluate, train
from rlvr.api.scoring import RewardScorer

__all__ = ["train", "evaluate", "TrainResult", "EvalResult", "RewardScorer"]
