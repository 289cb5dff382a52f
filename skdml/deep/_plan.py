"""How a deep fit is set up: input checks, validation split, batch plan, input transforms.

Free functions of the estimator (``est``), so that ``_estimator.py`` keeps the
parameters and the public methods, and ``_fitting.py`` the training itself.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data
from torch import nn
from torch.utils.data import Dataset

from .._training import class_disjoint_holdout, stratified_holdout
from ..losses import MetricObjective, build_loss, get_regularizer
from ._data import as_source, dataset_labels, dataset_shape, input_shape_of
from ._inputs import RandomAffine, fit_standardize
from ._network import build_backbone

__all__ = ["AUTO_BATCH_SIZE", "AUTO_CLASSES_PER_BATCH", "AUTO_EARLY_STOPPING_CLASSES",
           "AUTO_MAX_ITER", "AUTO_MAX_ITER_VECTORS", "VECTOR_BATCHES_PER_EPOCH",
           "VECTOR_MAX_FEATURES", "backbone_and_input_layer", "max_epochs",
           "PRESERVE_INPUT_AUTO", "batch_plan", "preserve_input_weight", "use_early_stopping", "validate_fit_input",
           "validate_transform_input", "validation_split", "wants_standardize",
           "augmentation", "build_objective", "warn_if_one_dimensional"]

#: ``n_classes_per_batch="auto"``: this many classes per batch, at most.
AUTO_CLASSES_PER_BATCH = 16
#: ``n_samples_per_class="auto"``: batches of about this many samples (K >= 4).
AUTO_BATCH_SIZE = 64
#: ``early_stopping="auto"`` with ``validation_fraction`` set: on with at least this many
#: classes (the class-disjoint hold-out then keeps 8 or more for training).
AUTO_EARLY_STOPPING_CLASSES = 10
#: ``preserve_input="auto"`` with the default backbone: this over the number of training
#: classes (see the deep learner's user guide).
PRESERVE_INPUT_AUTO = 50.0
#: ``max_iter="auto"``: most epochs of a fit ...
AUTO_MAX_ITER = 90
#: ... and of a fit of the default vector backbone (it starts from the input's principal
#: components: longer training drifts towards the training classes, see the user guide).
AUTO_MAX_ITER_VECTORS = 30
#: The default vector backbone sees at most this many input coordinates: wider vectors are
#: projected on their leading principal axes by the standardisation layer.
VECTOR_MAX_FEATURES = 256
#: ``n_samples_per_class="auto"`` on vectors: an epoch of at most this many batches (larger
#: batches on larger data sets; a vector step costs little beside its fixed overhead).
VECTOR_BATCHES_PER_EPOCH = 32


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


def use_early_stopping(est, n_classes):
    """``early_stopping`` resolved.

    ``"auto"`` is on only when the user asked for a validation set
    (``validation_fraction`` given) and the data hold at least 10 classes. By
    default it is off: the fit trains on every class with the whole cosine
    schedule and stops when its loss stops improving. Holding out 10 % of the
    classes and stopping on their MAP@R cost 1.9-3.8 unseen-class Recall@1 on
    Omniglot in three of three runs (``bench_deep_levers.py --held-back``).
    """
    if est.early_stopping == "auto":
        return est.validation_fraction is not None and n_classes >= AUTO_EARLY_STOPPING_CLASSES
    return bool(est.early_stopping)


def validation_split(est, y_enc, early_stopping, rng):
    """``(train_idx, val_idx)``; ``val_idx`` is ``None`` without validation."""
    fraction = est.validation_fraction
    if fraction is None and not early_stopping:
        return np.arange(len(y_enc)), None
    seed = np.random.RandomState(rng.randint(0, 2**31 - 1))
    holdout = class_disjoint_holdout if est.validation_split == "class_disjoint" \
        else stratified_holdout
    return holdout(y_enc, 0.1 if fraction is None else fraction, seed)


def batch_plan(est, y_train, input_shape=None):
    """``(P, K)``: classes per batch and samples per class, from the training labels.

    ``"auto"``: P = min(16, classes); K = max(4, 64 // P), bounded by the
    largest class (so batches hold about 64 samples); an explicit P larger
    than the number of training classes raises. On vectors (``input_shape``
    of length 1), ``"auto"`` K also grows so that an epoch takes at most
    :data:`VECTOR_BATCHES_PER_EPOCH` batches.
    """
    n_classes = len(np.unique(y_train))
    if est.n_classes_per_batch == "auto":
        P = min(AUTO_CLASSES_PER_BATCH, n_classes)
    else:
        P = int(est.n_classes_per_batch)
        if P > n_classes:
            raise ValueError(
                f"The batch plan cannot be met: n_classes_per_batch={P} but the training data "
                f"hold only {n_classes} classes. Lower n_classes_per_batch or use 'auto'.")
    if est.n_samples_per_class == "auto":
        K = max(4, AUTO_BATCH_SIZE // P)
        if input_shape is not None and len(input_shape) == 1:
            K = max(K, -(-len(y_train) // (VECTOR_BATCHES_PER_EPOCH * P)))
    else:
        K = int(est.n_samples_per_class)
    largest = int(np.bincount(np.unique(y_train, return_inverse=True)[1]).max())
    return P, min(K, largest)


def max_epochs(est, input_shape, in_memory=True):
    """``max_iter`` resolved: ``"auto"`` is 90 epochs, 30 for the default vector backbone.

    The 30 apply to in-memory vectors (arrays), whose embedding starts as their
    principal components; vectors from a ``Dataset`` get 90.
    """
    if est.max_iter != "auto":
        return int(est.max_iter)
    vectors = len(input_shape) == 1 and est.backbone is None and in_memory
    return AUTO_MAX_ITER_VECTORS if vectors else AUTO_MAX_ITER


def backbone_and_input_layer(est, source, train_idx, input_shape):
    """``(backbone, standardize)``: the backbone and its fitted input layer (or ``None``).

    The default vector backbone works in the linear learners' kind of space:
    the standardisation centres the vectors, scales them (one scale for
    features of one unit, see :func:`~skdml.deep._inputs.fit_standardize`)
    and turns them to their principal axes, keeping at most
    :data:`VECTOR_MAX_FEATURES`; the MLP is built for that width.
    """
    if est.backbone is None and len(input_shape) == 1 and est.standardize is not False:
        standardize = fit_standardize(source, train_idx, input_shape, scale="auto",
                                      n_axes=VECTOR_MAX_FEATURES)
        width = standardize.out_features
        return build_backbone(None, input_shape if width is None else (width,)), standardize
    backbone = build_backbone(est.backbone, input_shape)
    if not wants_standardize(est, backbone):
        return backbone, None
    return backbone, fit_standardize(source, train_idx, input_shape)


def wants_standardize(est, backbone):
    """``standardize`` resolved: ``"auto"`` is off for a backbone that normalises its input."""
    if est.standardize == "auto":
        return not getattr(backbone, "normalizes_input", False)
    return bool(est.standardize)


def augmentation(est, input_shape):
    """The training augmentation: ``"auto"`` is :class:`RandomAffine` for images, none else."""
    if callable(est.augment):
        return est.augment
    images = len(input_shape) == 3
    if est.augment is True and not images:
        raise ValueError(
            f"augment=True needs images (n, C, H, W); the inputs are vectors of shape "
            f"{tuple(input_shape)}. Use augment='auto' (off for vectors) or a callable.")
    if est.augment == "auto" or est.augment is True:
        return RandomAffine() if images else None
    return None


def preserve_input_weight(est, n_classes):
    """``preserve_input`` resolved: ``"auto"`` is ``50 / n_classes`` for the default backbone only.

    The fewer the training classes, the less their labels say about unseen
    classes, and the more the input's own geometry is kept.
    """
    if est.preserve_input == "auto":
        return PRESERVE_INPUT_AUTO / max(int(n_classes), 1) if est.backbone is None else 0.0
    return float(est.preserve_input)


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


def build_objective(est, n_classes):
    """The :class:`~skdml.losses.MetricObjective` of ``est`` (same wiring as ECAML and JRD)."""
    loss = build_loss(est.loss, est.loss_params, n_classes=n_classes,
                      embedding_dim=est.n_components)
    regularizer = None
    if est.regularizer is not None and est.regularizer_weight > 0:
        regularizer = get_regularizer(est.regularizer, **(est.regularizer_params or {}))
        if isinstance(est.regularizer, nn.Module):  # fits never share state
            regularizer = copy.deepcopy(regularizer)
    return MetricObjective(loss, regularizer, est.regularizer_weight)
