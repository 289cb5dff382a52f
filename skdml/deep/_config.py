"""Every setting of one deep fit, with each ``"auto"`` resolved once, in one place.

:func:`resolve_config` reads the estimator's parameters (and nothing else
reads them during training): it checks the grouped parameters
(``optimizer_params``, ``loader_params``), resolves every ``"auto"`` from the
data, draws the validation split and returns a frozen :class:`FitConfig`. The
trainer (:class:`~skdml.deep._trainer.DeepTrainer`) works from that config
only, so a setting means one thing wherever it is used.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np
import torch
from .._training import validation_holdout
from ._inputs import RandomAffine

__all__ = ["AUTO_BATCH_SIZE", "AUTO_CLASSES_PER_BATCH", "AUTO_EARLY_STOPPING_CLASSES",
           "AUTO_LOSS", "AUTO_LOSS_VECTORS", "AUTO_MAX_ITER", "AUTO_MAX_ITER_VECTORS", "FitConfig", "LOADER_DEFAULTS",
           "OPTIMIZER_DEFAULTS", "PRESERVE_INPUT_AUTO", "VECTOR_BATCHES_PER_EPOCH",
           "VECTOR_MAX_FEATURES", "check_loader_params", "check_optimizer_params",
           "resolve_config"]

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
#: ``loss="auto"``: the loss of in-memory vectors with the default backbone (the linear
#: learners' default: it kept unseen-class Recall@1 at or above the raw features on
#: every held-out vector split, where the multi-similarity loss fell below it on two) ...
AUTO_LOSS_VECTORS = "binomial"
#: ... and of everything else (images, Datasets, your backbone: the study on Omniglot).
AUTO_LOSS = "multisimilarity"

#: ``optimizer_params``: skdml's keys and their defaults; any other key goes to the torch
#: optimiser's constructor (e.g. ``betas``, ``momentum``), as ``weight_decay`` does.
OPTIMIZER_DEFAULTS = {"weight_decay": 1e-4, "head_lr_mult": 1.0, "param_groups": None,
                      "lr_schedule": "cosine", "ema_epochs": 5.0}
#: The ``optimizer_params`` keys the trainer uses itself (the others build the optimiser).
TRAINER_KEYS = ("head_lr_mult", "param_groups", "lr_schedule", "ema_epochs")
#: ``loader_params``: the keys and their defaults (nothing else is accepted).
LOADER_DEFAULTS = {"num_workers": 0, "pin_memory": "auto", "transform_batch_size": 256,
                   "batches_per_epoch": None}


def _nonnegative(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) \
        and np.isfinite(value) and value >= 0


def _positive_int(value, allow_zero=False):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) \
        and value >= (0 if allow_zero else 1)


def check_optimizer_params(params):
    """``optimizer_params`` merged over :data:`OPTIMIZER_DEFAULTS`, each skdml key checked."""
    merged = dict(OPTIMIZER_DEFAULTS, **(params or {}))
    problems = []
    if not _nonnegative(merged["weight_decay"]):
        problems.append(f"weight_decay must be a finite float >= 0, got {merged['weight_decay']!r}")
    if not _nonnegative(merged["head_lr_mult"]):
        problems.append(f"head_lr_mult must be a finite float >= 0, got {merged['head_lr_mult']!r}")
    if merged["lr_schedule"] not in ("cosine", "constant"):
        problems.append(f"lr_schedule must be 'cosine' or 'constant', got {merged['lr_schedule']!r}")
    if merged["ema_epochs"] is not None and not _nonnegative(merged["ema_epochs"]):
        problems.append(f"ema_epochs must be None or a finite float >= 0, got "
                        f"{merged['ema_epochs']!r}")
    groups = merged["param_groups"]
    if groups is not None and not (isinstance(groups, (list, tuple)) and all(
            isinstance(g, (list, tuple)) and len(g) == 2 and isinstance(g[0], str)
            and isinstance(g[1], dict) for g in groups)):
        problems.append(f"param_groups must be a list of (pattern, dict) pairs, got {groups!r}")
    if "lr" in merged:
        problems.append("the learning rate is the learning_rate parameter, not an "
                        "optimizer_params key")
    if problems:
        raise ValueError("Invalid optimizer_params: " + "; ".join(problems) + ".")
    return merged


def check_loader_params(params):
    """``loader_params`` merged over :data:`LOADER_DEFAULTS`; unknown keys are refused."""
    params = dict(params or {})
    unknown = sorted(set(params) - set(LOADER_DEFAULTS))
    if unknown:
        raise ValueError(f"Unknown loader_params keys {unknown}; the keys are "
                         f"{sorted(LOADER_DEFAULTS)}.")
    merged = dict(LOADER_DEFAULTS, **params)
    problems = []
    if not _positive_int(merged["num_workers"], allow_zero=True):
        problems.append(f"num_workers must be an int >= 0, got {merged['num_workers']!r}")
    if merged["pin_memory"] not in ("auto", True, False):
        problems.append(f"pin_memory must be 'auto', True or False, got {merged['pin_memory']!r}")
    if not _positive_int(merged["transform_batch_size"]):
        problems.append(f"transform_batch_size must be an int >= 1, got "
                        f"{merged['transform_batch_size']!r}")
    if merged["batches_per_epoch"] is not None and not _positive_int(merged["batches_per_epoch"]):
        problems.append(f"batches_per_epoch must be None or an int >= 1, got "
                        f"{merged['batches_per_epoch']!r}")
    if problems:
        raise ValueError("Invalid loader_params: " + "; ".join(problems) + ".")
    return merged


@dataclass(frozen=True)
class LoaderConfig:
    """How batches are read: workers, pinned memory, batch size of evaluation passes."""

    num_workers: int = 0
    pin_memory: bool = False
    batch_size: int = 256

    @classmethod
    def of(cls, params, device):
        """The settings of checked ``loader_params`` on ``device`` (also used by ``transform``)."""
        pin = device.type == "cuda" if params["pin_memory"] == "auto" \
            else bool(params["pin_memory"])
        return cls(int(params["num_workers"]), pin, int(params["transform_batch_size"]))


@dataclass(frozen=True)
class FitConfig:
    """One deep fit's settings, every ``"auto"`` resolved (see :func:`resolve_config`)."""

    name: str
    loss: object
    n_components: int
    normalize: bool
    device: torch.device
    amp: object
    max_iter: int
    n_classes_per_batch: int
    n_samples_per_class: int
    batches_per_epoch: int | None
    early_stopping: bool
    tol: float
    n_iter_no_change: int
    preserve_input: float
    augment: object
    standardize: bool
    default_vector_backbone: bool
    optimizer: object
    learning_rate: float
    optimizer_kwargs: dict
    head_lr_mult: float
    param_groups: tuple
    lr_schedule: str
    ema_epochs: float
    jrs_layers: tuple
    loader: LoaderConfig
    checkpoint_path: object
    verbose: int
    train_idx: np.ndarray = field(repr=False)
    val_idx: np.ndarray | None = field(repr=False)
    validation_split: str | None = None


def _early_stopping(est, n_classes):
    """``"auto"``: on only when ``validation_fraction`` is given and there are 10+ classes.

    By default the fit trains on every class with the whole cosine schedule:
    holding out 10 % of the classes and stopping on their MAP@R cost 1.9-3.8
    unseen-class Recall@1 on Omniglot in three of three runs (see the user
    guide's evidence).
    """
    if est.early_stopping == "auto":
        return est.validation_fraction is not None and n_classes >= AUTO_EARLY_STOPPING_CLASSES
    return bool(est.early_stopping)


def _split(est, y_enc, early_stopping, rng, resume):
    """``(train, val, kind)``; ``val`` is ``None`` without validation. A resumed fit keeps its own."""
    if resume is not None:
        train, val = resume.split
        kind = None if val is None else ("class_disjoint" if not set(np.unique(y_enc[val]))
                                         & set(np.unique(y_enc[train])) else "stratified")
        return np.asarray(train), None if val is None else np.asarray(val), kind
    if est.validation_fraction is None and not early_stopping:
        return np.arange(len(y_enc)), None, None
    seed = np.random.RandomState(rng.randint(0, 2**31 - 1))
    return validation_holdout(y_enc, est.validation_fraction, "auto", seed, scored_within=True)


def _batch_plan(est, y_train, input_shape):
    """``(P, K)``: P = min(16, classes), K = max(4, 64 // P) within the largest class.

    On vectors, ``"auto"`` K also grows so that an epoch takes at most
    :data:`VECTOR_BATCHES_PER_EPOCH` batches. An explicit P larger than the
    number of training classes raises.
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
        if len(input_shape) == 1:
            K = max(K, -(-len(y_train) // (VECTOR_BATCHES_PER_EPOCH * P)))
    else:
        K = int(est.n_samples_per_class)
    largest = int(np.bincount(np.unique(y_train, return_inverse=True)[1]).max())
    return P, min(K, largest)


def _augment(est, input_shape):
    """``"auto"`` and ``True``: :class:`RandomAffine` for images; nothing for vectors."""
    if callable(est.augment):
        return est.augment
    images = len(input_shape) == 3
    if est.augment is True and not images:
        raise ValueError(
            f"augment=True needs images (n, C, H, W); the inputs are vectors of shape "
            f"{tuple(input_shape)}. Use augment='auto' (off for vectors) or a callable.")
    if est.augment in ("auto", True):
        return RandomAffine() if images else None
    return None


def _jrs_layers(regularizer):
    """The backbone layers a JRS regulariser instance asks for (``layers``), as a tuple."""
    layers = getattr(regularizer, "layers", None) if not isinstance(regularizer, str) else None
    if layers is None:
        return ()
    return (layers,) if isinstance(layers, str) else tuple(layers)


def resolve_config(est, *, y_enc, input_shape, in_memory, device, backbone, rng, resume=None):
    """The :class:`FitConfig` of a fit of ``est`` on labels ``y_enc`` (one call per fit).

    ``backbone`` is the built backbone (``standardize="auto"`` asks whether it
    normalises its own input); ``rng`` draws the validation split (a resumed
    fit keeps the split of its first run, whatever the seed now).
    """
    n_classes = len(np.unique(y_enc))
    early_stopping = _early_stopping(est, n_classes)
    train_idx, val_idx, kind = _split(est, y_enc, early_stopping, rng, resume)
    if early_stopping and val_idx is None:
        raise ValueError("early_stopping needs a validation set: set validation_fraction.")
    y_train = y_enc[train_idx]
    P, K = _batch_plan(est, y_train, input_shape)
    opt = check_optimizer_params(est.optimizer_params)
    loader = check_loader_params(est.loader_params)
    default_vectors = est.backbone is None and len(input_shape) == 1
    loss = est.loss
    if isinstance(loss, str) and loss == "auto":
        if est.loss_params:
            raise ValueError("loss_params needs a named loss: loss='auto' picks the loss from "
                             "the data. Name it (e.g. loss='binomial') to pass its parameters.")
        loss = AUTO_LOSS_VECTORS if default_vectors and in_memory else AUTO_LOSS
    if est.max_iter == "auto":
        max_iter = AUTO_MAX_ITER_VECTORS if default_vectors and in_memory else AUTO_MAX_ITER
    else:
        max_iter = int(est.max_iter)
    if est.preserve_input == "auto":
        preserve = PRESERVE_INPUT_AUTO / len(np.unique(y_train)) if est.backbone is None else 0.0
    else:
        preserve = float(est.preserve_input)
    if est.standardize == "auto":
        standardize = not getattr(backbone, "normalizes_input", False)
    else:
        standardize = bool(est.standardize)
    return FitConfig(
        name=type(est).__name__, loss=loss, n_components=int(est.n_components),
        normalize=bool(est.normalize and est.n_components > 1), device=device, amp=est.amp,
        max_iter=max_iter, n_classes_per_batch=P, n_samples_per_class=K,
        batches_per_epoch=loader["batches_per_epoch"], early_stopping=early_stopping,
        tol=float(est.tol), n_iter_no_change=int(est.n_iter_no_change),
        preserve_input=preserve, augment=_augment(est, input_shape), standardize=standardize,
        default_vector_backbone=default_vectors, optimizer=est.optimizer,
        learning_rate=float(est.learning_rate),
        optimizer_kwargs={k: v for k, v in opt.items() if k not in TRAINER_KEYS},
        head_lr_mult=float(opt["head_lr_mult"]),
        param_groups=tuple(opt["param_groups"] or ()), lr_schedule=opt["lr_schedule"],
        ema_epochs=float(opt["ema_epochs"] or 0.0),
        jrs_layers=_jrs_layers(est.regularizer),
        loader=LoaderConfig.of(loader, device), checkpoint_path=est.checkpoint_path,
        verbose=int(est.verbose), train_idx=train_idx, val_idx=val_idx, validation_split=kind)
