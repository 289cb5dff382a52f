"""The errors and warnings skdml raises on purpose, to catch by name.

* :class:`CheckpointError`: a checkpoint file that cannot be used (missing,
  truncated, corrupted, foreign, unsafe, missing an entry), a ``checkpoint_path``
  that cannot be written, or one that another fit holds;
* :class:`CheckpointWarning`: a checkpoint write failed during training; training
  went on, and the fitted estimator keeps what it learned;
* :class:`NonFiniteLossError`: the training objective became NaN or infinite; the
  fit is discarded and the estimator is left as it was.

Examples
--------
>>> import warnings
>>> from skdml.exceptions import CheckpointError, CheckpointWarning
>>> issubclass(CheckpointError, OSError), issubclass(CheckpointWarning, UserWarning)
(True, True)
"""

from ._training import CheckpointError, CheckpointWarning, NonFiniteLossError

__all__ = ["CheckpointError", "CheckpointWarning", "NonFiniteLossError"]
