"""What the deep estimator checks and builds before training: its inputs and its objective.

(Every other setting is resolved once in :mod:`skdml.deep._config`.)
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data
from torch import nn
from torch.utils.data import Dataset

from ..losses import MetricObjective, build_loss, get_regularizer
from ._data import as_source, dataset_labels, dataset_shape, input_shape_of

__all__ = ["build_objective", "validate_fit_input", "validate_transform_input",
           "warn_if_one_dimensional"]


def validate_fit_input(est, X, y):
    """Return ``(source, y, input_shape)``; source is a float32 tensor or the Dataset."""
    if isinstance(X, Dataset):
        input_shape = dataset_shape(X, "training")
        return X, dataset_labels(X, y), input_shape
    if y is None:
        raise ValueError(f"{type(est).__name__} requires y to be passed, but the target y "
                         "is None: labels are missing.")
    X, y = validate_data(est, X, y, allow_nd=True, dtype=np.float32)
    check_classification_targets(y)
    source = as_source(X)
    return source, y, tuple(source.shape[1:])


def validate_transform_input(est, X):
    """The source of ``transform``: checked against the fitted sample shape."""
    if isinstance(X, Dataset):
        shape = dataset_shape(X, "transform")
    else:
        X = validate_data(est, X, reset=False, allow_nd=True, dtype=np.float32)
        shape = input_shape_of(X.shape[1:])
    if shape != est.input_shape_:
        raise ValueError(f"X has samples of shape {shape}, the model was fitted on "
                         f"{est.input_shape_}.")
    return X if isinstance(X, Dataset) else as_source(X)


def warn_if_one_dimensional(est):
    """Warn that ``n_components=1`` is not normalised (the 1-d sphere is two points).

    scikit-learn's common checks fit with ``n_components=1``, so this is handled,
    not refused.
    """
    if est.normalize and est.n_components == 1:
        warnings.warn(
            "n_components=1 with normalize=True would give embeddings of +1 or -1 only; "
            "the 1-d embedding is not normalised. Use n_components >= 2 with a loss on "
            "cosine similarities (the default multi-similarity loss normalises).",
            UserWarning)


def build_objective(est, n_classes, loss=None):
    """The :class:`~skdml.losses.MetricObjective` of ``est`` (same wiring as ECAML and JRD).

    ``loss`` is the resolved loss (:attr:`FitConfig.loss <skdml.deep._config.FitConfig>`);
    ``None`` takes ``est.loss``, which must then not be ``"auto"``.
    """
    loss = est.loss if loss is None else loss
    if isinstance(loss, str) and loss == "auto":
        raise ValueError("loss='auto' is resolved by fit; pass the loss to build.")
    loss = build_loss(loss, est.loss_params, n_classes=n_classes,
                      embedding_dim=est.n_components)
    regularizer = None
    if est.regularizer is not None and est.regularizer_weight > 0:
        regularizer = get_regularizer(est.regularizer)  # a name, or an instance with its options
        if isinstance(regularizer, nn.Module):  # fits never share state
            regularizer = copy.deepcopy(regularizer)
    return MetricObjective(loss, regularizer, est.regularizer_weight)
