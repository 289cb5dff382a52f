"""What the deep estimator checks and builds before training: its inputs and its objective.

It reads no parameter of the estimator: the objective is built from the
fit's :class:`~skdml.deep._config.ObjectiveConfig` (every setting is resolved
once in :mod:`skdml.deep._config`); the input checks use the estimator only
for scikit-learn's ``validate_data`` and its fitted ``input_shape_``.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from sklearn.utils import check_array
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data
from torch import nn
from torch.utils.data import Dataset

from .._utils import check_label_input, check_orderable_labels, validate_fitted_data
from ..losses import MetricObjective, build_loss, get_regularizer
from ._data import as_source, dataset_labels, dataset_shape, input_shape_of

__all__ = ["build_objective", "validate_fit_input", "validate_transform_input"]


def _host(X):
    """A torch tensor as a host array (detached: one that requires grad included).

    bfloat16, which numpy lacks, comes back as float32 (every bfloat16 value exactly).
    """
    if not isinstance(X, torch.Tensor):
        return X
    X = X.detach().cpu()
    return (X.float() if X.dtype == torch.bfloat16 else X).numpy()


def validate_fit_input(est, X, y):
    """Return ``(source, y, input_shape)``; source is a float32 tensor or the Dataset."""
    X, y = _host(X), _host(y)
    if isinstance(X, Dataset):
        input_shape = dataset_shape(X, "training")
        for stale in ("n_features_in_", "feature_names_in_"):  # a Dataset has neither
            if hasattr(est, stale):
                delattr(est, stale)
        return X, dataset_labels(X, y), input_shape
    if y is None:
        raise ValueError(f"{type(est).__name__} requires y to be passed, but the target y "
                         "is None: labels are missing.")
    X, y = validate_data(est, X, check_label_input(y), allow_nd=True, dtype=np.float32)
    y = check_orderable_labels(y)
    check_classification_targets(y)
    source = as_source(X)
    return source, y, tuple(source.shape[1:])


def _ndim(X):
    """``X``'s number of axes (nested lists too; a ragged list counts as 2, for the checks)."""
    if hasattr(X, "ndim"):
        return X.ndim
    try:  # through __array__, as check_array reads it (not np.ndim's __array_function__)
        return np.asarray(X).ndim
    except (ValueError, TypeError):
        return 2


def validate_transform_input(est, X):
    """The source of ``transform``: checked against the fitted sample shape."""
    X = _host(X)
    if isinstance(X, Dataset):
        shape = dataset_shape(X, "transform")
    elif len(est.input_shape_) > 1:
        # images: compared by their shape, (H, W) and (1, H, W) alike (n_features_in_ is
        # an image's first axis, which differs between those two layouts of one image)
        X = check_array(X, allow_nd=True, ensure_2d=False, dtype=np.float32, input_name="X")
        if X.ndim < 2:
            raise ValueError(f"X must hold samples along its first axis; got shape {X.shape}.")
        shape = input_shape_of(X.shape[1:])
    elif _ndim(X) > 2:  # images for a model of vectors: not "1 features"
        shape = input_shape_of(np.shape(X)[1:])
    else:
        X = validate_fitted_data(est, X, allow_nd=True, dtype=np.float32)
        shape = input_shape_of(X.shape[1:])
    if shape != est.input_shape_:
        raise ValueError(f"X has samples of shape {shape}, the model was fitted on "
                         f"{est.input_shape_}.")
    return X if isinstance(X, Dataset) else as_source(X)


def build_objective(config, n_classes):
    """The :class:`~skdml.losses.MetricObjective` of an :class:`~skdml.deep._config.ObjectiveConfig`.

    The same wiring as ECAML and JRD; ``config.loss`` is resolved (never ``"auto"``).
    """
    if isinstance(config.loss, str) and config.loss == "auto":
        raise ValueError("loss='auto' is resolved by fit; pass the loss to build.")
    loss = build_loss(config.loss, config.loss_params, n_classes=n_classes,
                      embedding_dim=config.n_components)
    regularizer = None
    if config.regularizer is not None and config.regularizer_weight > 0:
        regularizer = get_regularizer(config.regularizer)  # a name, or an instance with its options
        if isinstance(regularizer, nn.Module):  # fits never share state
            regularizer = copy.deepcopy(regularizer)
    return MetricObjective(loss, regularizer, config.regularizer_weight)
