"""The shared training machinery of every skdml learner.

- :func:`train_epochs` (``_engine``): the one epoch loop over minibatches, with the
  non-finite guard; :class:`Trainable` is what it trains.
- ``_callbacks``: validation, early stopping (restore-best or refit), checkpoints,
  progress (tqdm).
- ``_checkpoint``: atomic checkpoint files with a digest, loaded without unpickling objects;
  ``_checkpoint_lock``: one fit per checkpoint path, checked writable before training.
- :func:`run_manopt` (``_manopt``): the one pymanopt runner (SUML and the linear
  ``conjugate_gradient`` solver).
- :class:`~skdml._training._progress.IterationBar` (``_progress``): the one progress bar of
  the solvers that iterate to ``max_iter`` (SUML, the classic learners).
- :class:`ClassBalancedBatchSampler` (``_sampler``): P x K batch plans.
- ``_splits``: the validation hold-outs.
- ``_schedules``: learning-rate schedules (torch schedulers stepped per batch).
- :class:`WeightAverage` (``_averaging``): an EMA of the weights, updated after each step.
"""

from ._averaging import WeightAverage
from ._callbacks import Callback, Checkpoint, EarlyStopping, Progress, Validation
from ._checkpoint import CheckpointError, CheckpointWarning, load_checkpoint, save_checkpoint
from ._checkpoint_lock import claim_checkpoint_path
from ._engine import NonFiniteLossError, Trainable, TrainingResult, train_epochs
from ._manopt import SOLVERS, ManoptRun, run_manopt
from ._sampler import ClassBalancedBatchSampler
from ._schedules import LRSchedule, warmup_cosine, warmup_stable_decay
from ._splits import (
    class_disjoint_holdout,
    n_held_out_classes,
    stratified_holdout,
    validation_holdout,
)

__all__ = ["Callback", "Checkpoint", "CheckpointError", "CheckpointWarning",
           "ClassBalancedBatchSampler", "EarlyStopping", "LRSchedule", "ManoptRun",
           "NonFiniteLossError", "Progress", "SOLVERS", "Trainable", "TrainingResult",
           "Validation", "WeightAverage",
           "claim_checkpoint_path",
           "class_disjoint_holdout", "load_checkpoint", "n_held_out_classes", "run_manopt",
           "save_checkpoint",
           "stratified_holdout", "train_epochs", "validation_holdout", "warmup_cosine",
           "warmup_stable_decay"]
