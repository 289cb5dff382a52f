"""The deep learner's parameters: their constraints, their nested keys, and the one
resolved configuration of each fit.

This is the one module that reads the estimator's parameters (besides the
estimator's ``fit``, which hands them here):

- :data:`PARAMETER_CONSTRAINTS` are the estimator's ``_parameter_constraints``;
- :func:`nested_keys` and :func:`set_nested_option` are the estimator's
  skorch-style nested parameters (``optimizer__weight_decay``,
  ``loader__num_workers``, ``loss__margin``, ``regularizer__log``), checked
  at ``set_params`` with the same lists the fit checks;
- :func:`resolve_config` checks the grouped parameters (``optimizer_params``,
  ``loader_params``, ``loss_params``), resolves every ``"auto"`` from the data,
  draws the validation split and returns a frozen :class:`FitConfig`. The
  objective (:func:`~skdml.deep._plan.build_objective`), the trainer
  (:class:`~skdml.deep._trainer.DeepTrainer`) and the training state work from
  that config only, so a setting means one thing wherever it is used.

Adding a parameter: its constraint here, its resolution in
:func:`resolve_config` and a :class:`FitConfig` field; its name in the
estimator's signature and docstring (see ``doc/architecture.md``).
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.utils._param_validation import Options, StrOptions
from torch import nn

from .._training import validation_holdout
from .._utils._params import (StrictInterval, check_loss_params, constructor_keys, loss_keys,
                              non_negative_real, positive_int, rebuild_with)
from .._utils._torch import DEVICE_CONSTRAINT
from .._utils._warnings import warn_user
from ..losses import LOSSES, REGULARIZERS, get_regularizer
from ._inputs import RandomAffine

__all__ = ["AUTO_BATCH_SIZE", "AUTO_CLASSES_PER_BATCH", "AUTO_EARLY_STOPPING_CLASSES",
           "AUTO_LOSS", "AUTO_LOSS_FALLBACK", "AUTO_LOSS_VECTORS", "AUTO_MAX_ITER",
           "AUTO_MAX_ITER_VECTORS", "COLLAPSE_REFITS", "DECAYING_SCHEDULES", "FitConfig",
           "LOADER_DEFAULTS", "LR_SCHEDULES",
           "NESTED_PARAMS", "ObjectiveConfig", "OPTIMIZER_DEFAULTS", "PARAMETER_CONSTRAINTS",
           "PRESERVE_INPUT_AUTO", "VECTOR_BATCHES_PER_EPOCH", "VECTOR_MAX_FEATURES",
           "check_loader_params", "check_optimizer_params", "embedding_config", "loss_choices",
           "nested_keys", "objective_config", "resolve_config", "set_nested_option"]

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
#: ... and of a refit when that fit left the training classes unseparated (collapsed; see
#: ``SEPARATION_MIN`` in ``_trainer.py``): kept when it separates them.
AUTO_LOSS_FALLBACK = "binomial"
#: The refits of a collapsed fit, in order, each from the same start and each changing one
#: ``"auto"`` setting of the first fit; the first that separates the training classes is
#: kept. A refit applies only where its setting is ``"auto"``: the loss (``loss="auto"``
#: chose the multi-similarity loss), then the augmentation of images (``augment="auto"``;
#: on faces under strong synthetic lighting, the augmented fits stayed collapsed with
#: either loss, on every seed, while unaugmented ones separated the 19 training people).
COLLAPSE_REFITS = ({"loss": AUTO_LOSS_FALLBACK}, {"augment": False})

#: ``optimizer_params["lr_schedule"]``: the learning-rate schedules of the trainer.
LR_SCHEDULES = ("cosine", "warmup_stable_decay", "constant")
#: The schedules whose rate reaches 0 at ``max_iter``: a fit that gets there ends as planned
#: (no ``ConvergenceWarning``); a constant rate there was cut short.
DECAYING_SCHEDULES = ("cosine", "warmup_stable_decay")
#: ``optimizer_params``: skdml's keys and their defaults; any other key goes to the torch
#: optimiser's constructor (e.g. ``betas``, ``momentum``), as ``weight_decay`` does.
OPTIMIZER_DEFAULTS = {"weight_decay": 1e-4, "head_lr_mult": 1.0, "param_groups": None,
                      "lr_schedule": "warmup_stable_decay", "ema_epochs": 5.0}
#: The ``optimizer_params`` keys the trainer uses itself (the others build the optimiser).
TRAINER_KEYS = ("head_lr_mult", "param_groups", "lr_schedule", "ema_epochs")
#: ``loader_params``: the keys and their defaults (nothing else is accepted).
LOADER_DEFAULTS = {"num_workers": 0, "pin_memory": "auto", "transform_batch_size": 256,
                   "batches_per_epoch": None}


#: ``optimizer``: the names and the torch optimisers they stand for.
OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}


def loss_choices():
    """The ``loss`` names, from the loss registry: ``{"auto", ...}`` as the docstring shows them."""
    return "{" + ", ".join(f'"{name}"' for name in ["auto", *sorted(LOSSES)]) + "}"


def regularizer_choices():
    """The ``regularizer`` names, from the registry, as the docstring shows them."""
    return "{" + ", ".join(f'"{name}"' for name in sorted(REGULARIZERS)) + "}"


#: The estimator's ``_parameter_constraints`` (checked by scikit-learn at ``fit``).
PARAMETER_CONSTRAINTS = {
    "backbone": [None, callable],
    "n_components": [positive_int()],
    "normalize": ["boolean"],
    "loss": [StrOptions(set(LOSSES) | {"auto"}), callable],
    "loss_params": [None, dict],
    "regularizer": [None, StrOptions(set(REGULARIZERS)), callable],
    "regularizer_weight": [non_negative_real()],
    "preserve_input": [non_negative_real(), StrOptions({"auto"})],
    "optimizer": [StrOptions(set(OPTIMIZERS)), type],
    "learning_rate": [StrictInterval(Real, 0, None, closed="neither")],
    "optimizer_params": [None, dict],
    "max_iter": [positive_int(), StrOptions({"auto"})],
    "tol": [non_negative_real()],
    "n_classes_per_batch": [StrictInterval(Integral, 2, None, closed="left"),
                            StrOptions({"auto"})],
    "n_samples_per_class": [positive_int(),
                            StrOptions({"auto"})],
    "early_stopping": ["boolean", StrOptions({"auto"})],
    "validation_fraction": [StrictInterval(Real, 0, 1, closed="neither"), None],
    "n_iter_no_change": [positive_int()],
    "checkpoint_path": [None, str, os.PathLike],
    "warm_start": ["boolean"],
    "standardize": ["boolean", StrOptions({"auto"})],
    "augment": ["boolean", StrOptions({"auto"}), callable],
    "device": DEVICE_CONSTRAINT,
    "amp": [StrOptions({"bf16", "fp16"}), Options(bool, {False}), None],
    "loader_params": [None, dict],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
    "callbacks": [None, list, tuple],
}

#: Nested parameters (``set_params(optimizer__weight_decay=0.1)``): each prefix and where its
#: keys go (see :class:`skdml._utils._params.NestedParamsMixin`). The ``*_params`` spellings
#: are accepted too.
NESTED_PARAMS = {"optimizer": "optimizer_params", "optimizer_params": "optimizer_params",
                 "loader": "loader_params", "loader_params": "loader_params",
                 "loss": "loss_params", "loss_params": "loss_params",
                 "regularizer": "<instance>"}


def optimizer_keys(optimizer):
    """The ``optimizer_params`` keys of ``optimizer`` (a name or a class); ``None``: any."""
    torch_keys = constructor_keys(OPTIMIZERS.get(optimizer, optimizer) if isinstance(
        optimizer, (str, type)) else None, exclude=("params", "lr"))
    if torch_keys is None:
        return None
    # weight_decay is skdml's default of the optimisers that take one (Rprop does not)
    ours = set(OPTIMIZER_DEFAULTS) - ({"weight_decay"} - set(torch_keys))
    return sorted(ours | set(torch_keys))


def regularizer_keys(regularizer):
    """The options of ``regularizer`` (a name, class or module instance); ``None``: any."""
    if regularizer is None:
        raise ValueError("There is no regularizer to set options of: set regularizer "
                         "(e.g. regularizer='ec') first.")
    target = REGULARIZERS.get(regularizer) if isinstance(regularizer, str) else regularizer
    if isinstance(target, nn.Module):
        target = type(target)
    if not isinstance(target, type):
        raise ValueError(f"The regularizer {regularizer!r} is a function: it has no options "
                         "to set.")
    return constructor_keys(target)


def nested_keys(est, prefix):
    """The keys ``prefix__<key>`` of ``est`` takes now (``None``: any); see :data:`NESTED_PARAMS`."""
    route = NESTED_PARAMS[prefix]
    if route == "optimizer_params":
        return optimizer_keys(est.optimizer)
    if route == "loader_params":
        return sorted(LOADER_DEFAULTS)
    if route == "loss_params":
        return loss_keys(est.loss)
    return regularizer_keys(est.regularizer)


def set_nested_option(est, prefix, key, value):
    """``regularizer__<key>=value``: the regulariser, built with that option over its own."""
    reg = est.regularizer
    if isinstance(reg, str):
        est.regularizer = get_regularizer(reg, **{key: value})
    elif isinstance(reg, type):
        est.regularizer = reg(**{key: value})
    else:
        est.regularizer = rebuild_with(reg, **{key: value})


def _nonnegative(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) \
        and np.isfinite(value) and value >= 0


def _positive_int(value, allow_zero=False):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) \
        and value >= (0 if allow_zero else 1)


def check_optimizer_params(params, optimizer="adam"):
    """``optimizer_params`` merged over :data:`OPTIMIZER_DEFAULTS`, each skdml key checked.

    A key that is neither skdml's nor taken by ``optimizer``'s constructor is
    refused (the list :func:`nested_keys` checks ``optimizer__<key>`` with).
    """
    if isinstance(optimizer, type) and not issubclass(optimizer, torch.optim.Optimizer):
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)} or a subclass of "
                         f"torch.optim.Optimizer; got the class {optimizer.__name__}.")
    if isinstance(optimizer, type) and issubclass(optimizer, torch.optim.LBFGS):
        # it failed inside torch: "LBFGS doesn't support per-parameter options"
        raise ValueError("optimizer=torch.optim.LBFGS cannot train here: it re-evaluates the "
                         "loss through a closure and takes one parameter group, where the "
                         "training loop takes one step per minibatch with the head's and the "
                         "backbone's groups. Use a first-order optimiser (Adam, SGD, Rprop...).")
    if isinstance(optimizer, type) and issubclass(optimizer, torch.optim.SparseAdam):
        # it failed inside training: "SparseAdam does not support dense gradients"
        raise ValueError("optimizer=torch.optim.SparseAdam takes sparse gradients only (of "
                         "sparse embedding tables); the networks here have dense ones. Use "
                         "Adam or AdamW.")
    merged = dict(OPTIMIZER_DEFAULTS, **(params or {}))
    torch_keys = constructor_keys(OPTIMIZERS.get(optimizer, optimizer) if isinstance(
        optimizer, (str, type)) else None, exclude=("params", "lr"))
    if (torch_keys is not None and "weight_decay" not in torch_keys
            and "weight_decay" not in (params or {})):
        # skdml's default weight decay, for an optimiser that takes one (Rprop and others do
        # not: they were refused for a key the user never set)
        del merged["weight_decay"]
    problems = []
    valid = optimizer_keys(optimizer)
    unknown = [] if valid is None else sorted(set(merged) - set(valid) - {"lr"})
    if unknown:
        name = getattr(OPTIMIZERS.get(optimizer, optimizer), "__name__", optimizer)
        problems.append(f"the optimizer {name} does not accept {unknown}; the keys are {valid}")
    if "weight_decay" in merged and not _nonnegative(merged["weight_decay"]):
        problems.append(f"weight_decay must be a finite float >= 0, got {merged['weight_decay']!r}")
    if not _nonnegative(merged["head_lr_mult"]):
        problems.append(f"head_lr_mult must be a finite float >= 0, got {merged['head_lr_mult']!r}")
    if merged["lr_schedule"] not in LR_SCHEDULES:
        problems.append("lr_schedule must be one of " + ", ".join(map(repr, LR_SCHEDULES))
                        + f", got {merged['lr_schedule']!r}")
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

    def on(self, device):
        """These settings on ``device`` (a fitted model unpickled on a CPU pins no memory)."""
        return self if device.type == "cuda" or not self.pin_memory else \
            dataclasses.replace(self, pin_memory=False)


@dataclass(frozen=True)
class ObjectiveConfig:
    """What the objective is built from (:func:`~skdml.deep._plan.build_objective`)."""

    loss: object
    loss_params: dict
    regularizer: object
    regularizer_weight: float
    n_components: int


@dataclass(frozen=True)
class EmbeddingConfig:
    """What ``transform`` embeds with: fixed at ``fit``, kept by the fitted estimator."""

    loader: LoaderConfig
    amp: object
    n_components: int


@dataclass(frozen=True)
class FitConfig:
    """One deep fit's settings, every ``"auto"`` resolved (see :func:`resolve_config`).

    ``standardize`` is ``None`` when it is ``"auto"`` with your backbone: the
    built backbone then decides (:func:`standardizes`).
    """

    name: str
    loss: object
    objective: ObjectiveConfig
    backbone: object
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
    standardize: bool | None
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
    #: the loss was chosen by ``loss="auto"`` (a collapsed fit may then be refitted)
    auto_loss: bool = False
    #: images augmented by ``augment="auto"`` (a collapsed fit may be refitted without)
    auto_augment: bool = False
    #: the :data:`COLLAPSE_REFITS` entry this fit is (``None``: the usual choices); saved
    #: with the run, so that resuming it keeps those choices
    refit: dict | None = None


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
    :data:`VECTOR_BATCHES_PER_EPOCH` batches. An explicit P is capped at the
    number of training classes.
    """
    n_classes = len(np.unique(y_train))
    if est.n_classes_per_batch == "auto":
        P = min(AUTO_CLASSES_PER_BATCH, n_classes)
    else:
        # capped at the training classes, as in ECAML and JRD (one grid over data sets)
        P = min(int(est.n_classes_per_batch), n_classes)
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


def objective_config(est, loss=None):
    """The :class:`ObjectiveConfig` of ``est``; ``loss`` is the resolved loss (default: ``est.loss``)."""
    loss = est.loss if loss is None else loss
    check_loss_params(loss, est.loss_params)
    return ObjectiveConfig(loss=loss, loss_params=dict(est.loss_params or {}),
                           regularizer=est.regularizer,
                           regularizer_weight=float(est.regularizer_weight),
                           n_components=int(est.n_components))


def embedding_config(config):
    """The :class:`EmbeddingConfig` a fit with ``config`` leaves to ``transform``."""
    return EmbeddingConfig(loader=config.loader, amp=config.amp,
                           n_components=config.n_components)


def standardizes(config, backbone):
    """Whether the fit standardises the input of the built ``backbone``.

    ``standardize="auto"``: yes, unless the backbone normalises its own input
    (a :class:`~skdml.deep.backbones.FeatureExtractor` with ``mean``).
    """
    if config.standardize is None:
        return not getattr(backbone, "normalizes_input", False)
    return config.standardize


def _warn_if_one_dimensional(normalize, n_components):
    """Warn that ``n_components=1`` is not normalised (the 1-d sphere is two points).

    scikit-learn's common checks fit with ``n_components=1``, so this is handled,
    not refused.
    """
    if normalize and n_components == 1:
        warn_user(
            "n_components=1 with normalize=True would give embeddings of +1 or -1 only; "
            "the 1-d embedding is not normalised. Use n_components >= 2 with a loss on "
            "cosine similarities (the default multi-similarity loss normalises).",
            UserWarning)


def _warn_if_regularizer_unused(regularizer, weight):
    """Warn where ``regularizer`` and ``regularizer_weight`` leave the term out: a regulariser
    at the default weight 0 (ECAML's and JRD's defaults are positive) or a weight with no
    regulariser."""
    if regularizer is not None and weight == 0:
        warn_user(
            f"regularizer={regularizer!r} with regularizer_weight=0 (the default) adds nothing "
            "to the loss: set regularizer_weight > 0 (e.g. 1.0) to train with it.", UserWarning)
    elif regularizer is None and weight > 0:
        warn_user(
            f"regularizer_weight={weight} has no effect without a regularizer: set "
            "regularizer='ec' or 'jrs' (or drop the weight).", UserWarning)


def resolve_config(est, *, y_enc, input_shape, in_memory, device, rng, resume=None,
                   refit=None):
    """The :class:`FitConfig` of a fit of ``est`` on labels ``y_enc`` (one call per fit).

    ``rng`` draws the validation split (a resumed fit keeps the split of its
    first run, whatever the seed now). ``refit``: one of :data:`COLLAPSE_REFITS`
    when this fit is the refit of a collapsed one (``None``: the usual choices):
    the loss that ``loss="auto"`` stands for, or ``augment="auto"`` turned off.
    """
    _warn_if_one_dimensional(est.normalize, est.n_components)
    _warn_if_regularizer_unused(est.regularizer, est.regularizer_weight)
    n_classes = len(np.unique(y_enc))
    early_stopping = _early_stopping(est, n_classes)
    train_idx, val_idx, kind = _split(est, y_enc, early_stopping, rng, resume)
    if early_stopping and val_idx is None:
        if resume is not None:  # the run keeps its own split: it was trained without one
            raise ValueError(
                f"early_stopping needs a validation set, and the run warm_start resumes from "
                f"{resume.source} was trained without one (a resumed fit keeps the run's "
                "split): resume with early_stopping=False and validation_fraction=None, or "
                "fit with warm_start=False to start afresh with a validation set.")
        raise ValueError("early_stopping needs a validation set: set validation_fraction.")
    y_train = y_enc[train_idx]
    P, K = _batch_plan(est, y_train, input_shape)
    opt = check_optimizer_params(est.optimizer_params, est.optimizer)
    loader = check_loader_params(est.loader_params)
    default_vectors = est.backbone is None and len(input_shape) == 1
    loss = est.loss
    if isinstance(loss, str) and loss == "auto":
        if est.loss_params:
            raise ValueError("loss_params needs a named loss: loss='auto' picks the loss from "
                             "the data. Name it (e.g. loss='binomial') to pass its parameters.")
        loss = (refit or {}).get("loss") or (
            AUTO_LOSS_VECTORS if default_vectors and in_memory else AUTO_LOSS)
    if est.max_iter == "auto":
        max_iter = AUTO_MAX_ITER_VECTORS if default_vectors and in_memory else AUTO_MAX_ITER
    else:
        max_iter = int(est.max_iter)
    if est.preserve_input == "auto":
        preserve = PRESERVE_INPUT_AUTO / len(np.unique(y_train)) if est.backbone is None else 0.0
    else:
        preserve = float(est.preserve_input)
    if est.standardize == "auto":
        standardize = True if est.backbone is None else None  # None: the backbone decides
    else:
        standardize = bool(est.standardize)
    augment = _augment(est, input_shape)
    auto_augment = augment is not None and isinstance(est.augment, str)  # "auto"
    if auto_augment and (refit or {}).get("augment") is False:
        augment = None
    return FitConfig(
        # the progress bar's label: a collapse refit says which settings it changed
        name=type(est).__name__ + ("" if refit is None else " collapse refit (" + ", ".join(
            f"{k}={v!r}" for k, v in refit.items()) + ")"), loss=loss, objective=objective_config(est, loss),
        auto_loss=isinstance(est.loss, str) and est.loss == "auto",
        auto_augment=auto_augment,
        backbone=est.backbone, n_components=int(est.n_components),
        normalize=bool(est.normalize and est.n_components > 1), device=device, amp=est.amp,
        max_iter=max_iter, n_classes_per_batch=P, n_samples_per_class=K,
        batches_per_epoch=loader["batches_per_epoch"], early_stopping=early_stopping,
        tol=float(est.tol), n_iter_no_change=int(est.n_iter_no_change),
        preserve_input=preserve, augment=augment, standardize=standardize,
        default_vector_backbone=default_vectors, optimizer=est.optimizer,
        learning_rate=float(est.learning_rate),
        optimizer_kwargs={k: v for k, v in opt.items() if k not in TRAINER_KEYS},
        head_lr_mult=float(opt["head_lr_mult"]),
        param_groups=tuple(opt["param_groups"] or ()), lr_schedule=opt["lr_schedule"],
        ema_epochs=float(opt["ema_epochs"] or 0.0),
        jrs_layers=_jrs_layers(est.regularizer),
        loader=LoaderConfig.of(loader, device), checkpoint_path=est.checkpoint_path,
        verbose=int(est.verbose), train_idx=train_idx, val_idx=val_idx, validation_split=kind,
        refit=None if refit is None else dict(refit))
