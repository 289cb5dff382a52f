"""``DeepMetricTransformer``: deep metric learning as a scikit-learn transformer."""

from __future__ import annotations

import contextlib
import copy
import inspect
import os
import sys
import tempfile
import time
from fnmatch import fnmatchcase
from numbers import Integral, Real

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import (BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                          _fit_context)
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, Options, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .._sampling import ClassBalancedBatchSampler
from .._utils import resolve_device, torch_seed, thread_limits as torch_threads
from ._hooks import LayerCapture, match_modules
from .backbones import default_backbone

__all__ = ["DeepMetricTransformer", "NonFiniteLossError"]

_LOSS_NAMES = {"triplet", "npair", "binomial", "amsoftmax"}
_AUTO_CLASSES_PER_BATCH = 8


class NonFiniteLossError(ValueError, ArithmeticError):
    """Raised when the training objective becomes NaN or infinite (before the update)."""


# --------------------------------------------------------------------------- network
class EmbeddingNet(nn.Module):
    """Backbone + linear embedding head (+ optional L2 normalisation).

    ``forward`` returns ``(embeddings, aux, features)``: ``aux`` is what the
    backbone returned beside its features (``None``, a tensor or a dict of
    scalar tensors) and ``features`` the flattened backbone output.
    """

    def __init__(self, backbone, in_features, embedding_dim, normalize):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(in_features, embedding_dim)
        self.normalize = bool(normalize)

    def features(self, x):
        out = self.backbone(x)
        aux = None
        if isinstance(out, (tuple, list)):
            if len(out) != 2:
                raise ValueError("A backbone returning a tuple must return (features, aux).")
            out, aux = out
        return out.flatten(1), aux

    def embed(self, features):
        z = self.head(features)
        return F.normalize(z, dim=1) if self.normalize else z

    def forward(self, x):
        features, aux = self.features(x)
        return self.embed(features), aux, features


class _IndexedArray(Dataset):
    """Batched access to an in-memory tensor: ``ds[idx] -> (X[idx], idx)``."""

    def __init__(self, X):
        self.X = X

    def __len__(self):
        return self.X.shape[0]

    def __getitem__(self, idx):
        idx = torch.as_tensor(idx, dtype=torch.long)
        return self.X[idx], idx


class _IndexedDataset(Dataset):
    """Wraps a user ``Dataset``: ``ds[i] -> (x_i, i)`` (labels come from the fit's own y)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        return _item_x(self.dataset[i]), i


class _ListSampler:
    """Feeds index arrays to a DataLoader's ``batch_sampler`` as lists of ints."""

    def __init__(self, sampler):
        self.sampler = sampler

    def __len__(self):
        return len(self.sampler)

    def __iter__(self):
        for batch in self.sampler:
            yield np.asarray(batch).tolist()


def _item_x(item):
    return item[0] if isinstance(item, (tuple, list)) else item


def _first_item_shape(dataset):
    return tuple(np.shape(_item_x(dataset[0])))


def _sample_rank_check(shape, what="X"):
    """Input shape of one sample -> model input shape, or a clear error."""
    if len(shape) == 1:
        return tuple(shape)
    if len(shape) == 2:
        return (1,) + tuple(shape)
    if len(shape) == 3:
        return tuple(shape)
    raise ValueError(
        f"{what} must hold vectors (n, d), grey images (n, H, W) or images (n, C, H, W); got "
        f"samples of shape {tuple(shape)} (array rank {len(shape) + 1})."
    )


def _to_cpu(obj):
    """Recursively move tensors of nested dicts/lists to the CPU (for pickling)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def _module_cpu_copy(module):
    """A CPU deep copy of ``module`` that never duplicates its tensors on the GPU."""
    memo = {}
    for t in list(module.parameters()) + list(module.buffers()):
        cpu = t.detach().cpu()
        memo[id(t)] = nn.Parameter(cpu, requires_grad=t.requires_grad) if isinstance(
            t, nn.Parameter) else cpu
    return copy.deepcopy(module, memo)


def _atomic_save(obj, path):
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-ckpt-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(obj, fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


# --------------------------------------------------------------------------- estimator
class DeepMetricTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Deep metric learning with any torch backbone, as a scikit-learn transformer.

    A backbone (an ``nn.Module``) followed by a linear embedding head and an
    optional L2 normalisation is trained with a metric loss from
    :mod:`skdml.losses` (plus optional EC or JRS regularisation, plus any
    auxiliary losses returned by the backbone) on class-balanced batches of
    ``n_classes_per_batch`` x ``n_samples_per_class`` samples. ``transform``
    returns the embeddings as float32 numpy arrays, so the estimator drops into
    a ``Pipeline`` before ``KNeighborsClassifier`` and into ``GridSearchCV``.

    Parameters
    ----------
    backbone : torch.nn.Module, callable or None, default=None
        The network. An ``nn.Module`` instance is deep-copied at each ``fit`` (so
        clones and refits start from the same weights). A callable is called as
        ``backbone(input_shape)`` with the shape of one sample (``(d,)`` or
        ``(C, H, W)``) and must return an ``nn.Module``. ``None`` uses an MLP for
        vectors and a small CNN for images (see :mod:`skdml.deep.backbones`).
        Its output is flattened; its dimension is inferred by a dry forward pass.
        A backbone may return ``(features, aux)`` where ``aux`` is a scalar tensor
        or a dict of scalar tensors: these auxiliary losses are added to the
        objective and logged in ``history_`` (as ``"aux"`` or ``"aux_<key>"``).
    embedding_dim : int, default=128
        Output dimension of the linear embedding head.
    normalize : bool, default=True
        L2-normalise the embeddings.
    loss : {"binomial", "triplet", "npair", "amsoftmax"} or callable, default="binomial"
        Metric loss, resolved by :func:`skdml.losses.get_loss`. A callable
        ``loss(embeddings, labels) -> scalar tensor`` (e.g. a
        pytorch-metric-learning loss) is used as is (an ``nn.Module`` instance is
        deep-copied at fit); a class is instantiated with ``loss_params``. For
        ``"amsoftmax"`` (or a class taking them), ``n_classes`` and
        ``embedding_dim`` are filled in from the fit.
    loss_params : dict, default=None
        Keyword arguments of the loss.
    regularizer : {"ec", "jrs"}, callable or None, default=None
        ``"ec"``: Energy Confusion on the embeddings; as in the ECAML paper its
        gradient only reaches the embedding layer (the backbone features are
        detached for this term). ``"jrs"``: Joint Representation Similarity on
        ``[layers..., embeddings, class level]``, where the layers are
        ``jrs_layers`` (or, when ``None``, the backbone's pooled output) and the
        class level are the AM-Softmax class cosines when the loss has a
        ``class_cosines`` method (omitted otherwise). A callable is applied as
        ``regularizer(embeddings, labels)``.
    regularizer_weight : float, default=0.0
        Weight of the regulariser (0 disables it).
    regularizer_params : dict, default=None
        Keyword arguments of :func:`skdml.losses.get_regularizer`.
    jrs_layers : str or list of str, default=None
        Names (fnmatch patterns allowed) of backbone sub-modules whose outputs
        join the JRS joint representation; captured with forward hooks that are
        removed at the end of ``fit``.
    optimizer : {"adam", "adamw", "sgd"} or torch.optim.Optimizer class, default="adam"
        ``"sgd"`` uses momentum 0.9.
    lr : float, default=1e-4
        Learning rate of the backbone.
    head_lr_mult : float, default=10.0
        The embedding head and the loss's own parameters (e.g. AM-Softmax
        proxies) use ``lr * head_lr_mult``, as in the papers.
    weight_decay : float, default=2e-4
        Weight decay (ECAML's value).
    param_groups : list of (str, dict), default=None
        skorch-style parameter groups: ``[("backbone.blocks.0.*", {"lr": 0.0})]``.
        Patterns match the names ``backbone.<...>``, ``head.<...>`` and
        ``loss.<...>``; the first matching pattern wins and its options override
        the defaults of the parameter.
    max_epochs : int, default=20
        Total number of epochs (a budget: no ``ConvergenceWarning`` is raised).
        With ``warm_start`` training continues up to ``max_epochs`` in total.
    n_classes_per_batch : int or "auto", default="auto"
        P, classes per batch. ``"auto"`` uses ``min(8, n_training_classes)``. An
        explicit value larger than the number of training classes raises.
    n_samples_per_class : int, default=4
        K, samples per class per batch (with replacement for smaller classes).
    batches_per_epoch : int, default=None
        ``None`` gives ``ceil(n_train / (P * K))``.
    validation_fraction : float, default=None
        Fraction held out for validation (of the classes when
        ``validation_split="class_disjoint"``, of the samples when
        ``"stratified"``). ``None`` means 0.1 when ``early_stopping`` is on, no
        validation otherwise. The validation Recall@1 is logged in ``history_``.
    validation_split : {"class_disjoint", "stratified"}, default="class_disjoint"
        How the validation set is drawn.
    early_stopping : bool, default=False
        Stop when the validation Recall@1 has not improved for ``patience``
        epochs, and restore the best weights.
    patience : int, default=5
        Epochs without improvement before stopping.
    checkpoint_path : str or path-like, default=None
        Where to write (atomically) a checkpoint at the end of every epoch:
        model, loss, optimiser, grad scaler and RNG states, epoch and history.
        It is read with ``torch.load(weights_only=False)``: load only your own.
    warm_start : bool, default=False
        Resume from ``checkpoint_path`` if it exists, else from the current
        fitted model, instead of starting afresh.
    device : str or torch.device, default="auto"
        ``"auto"`` uses CUDA when available.
    amp : {"bf16", "fp16"} or False, default=False
        Automatic mixed precision. ``"fp16"`` also uses a ``GradScaler``. Losses
        are always computed in float32.
    num_workers : int, default=0
        DataLoader workers.
    pin_memory : bool or "auto", default="auto"
        Pin host memory of batches (``"auto"``: when the device is CUDA).
    transform_batch_size : int, default=256
        Batch size of ``transform`` and of the validation pass.
    random_state : int, RandomState instance or None, default=None
        Seeds the batch plan, the validation split and torch (initialisation,
        dropout), inside ``fit``; the global torch RNG is left untouched.
    verbose : int, default=0
        1 prints a table row per epoch; 2 also a progress line per batch.

    Attributes
    ----------
    module_ : EmbeddingNet
        The trained network (backbone + head), on ``device_``, in eval mode.
    loss_ : callable
        The fitted loss (holds e.g. the AM-Softmax proxies).
    classes_ : ndarray
        Training labels.
    input_shape_ : tuple
        Shape of one input sample as fed to the network.
    history_ : list of dict
        One dict per epoch: ``epoch``, ``loss`` (total objective), ``metric_loss``,
        ``regularizer``, auxiliary losses, ``val_recall@1`` (when validating),
        ``seconds`` (wall time, the only non-deterministic entry).
    n_iter_ : int
        Epochs run (in total, including resumed ones).
    best_epoch_, best_score_ : int, float
        Best validation epoch (1-based) and Recall@1 (when validating).
    device_ : torch.device
        Device of ``module_``.
    n_features_in_ : int
        Number of columns (or channels) of array inputs.

    See Also
    --------
    skdml.ECAML, skdml.JRD : linear learners with the same regularisers.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml import DeepMetricTransformer
    >>> rng = np.random.RandomState(0)
    >>> y = np.repeat(np.arange(4), 10)
    >>> X = rng.randn(40, 6) + 3 * y[:, None]
    >>> net = DeepMetricTransformer(embedding_dim=3, max_epochs=2, device="cpu",
    ...                             random_state=0)
    >>> Z = net.fit(X, y).transform(X)
    >>> Z.shape, Z.dtype, len(net.history_)
    ((40, 3), dtype('float32'), 2)
    """

    _parameter_constraints = {
        "backbone": [None, callable],
        "embedding_dim": [Interval(Integral, 1, None, closed="left")],
        "normalize": ["boolean"],
        "loss": [StrOptions(_LOSS_NAMES), callable],
        "loss_params": [None, dict],
        "regularizer": [None, StrOptions({"ec", "jrs"}), callable],
        "regularizer_weight": [Interval(Real, 0, None, closed="left")],
        "regularizer_params": [None, dict],
        "jrs_layers": [None, str, list, tuple],
        "optimizer": [StrOptions({"adam", "adamw", "sgd"}), type],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "head_lr_mult": [Interval(Real, 0, None, closed="left")],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "param_groups": [None, list, tuple],
        "max_epochs": [Interval(Integral, 1, None, closed="left")],
        "n_classes_per_batch": [StrOptions({"auto"}), Interval(Integral, 2, None, closed="left")],
        "n_samples_per_class": [Interval(Integral, 2, None, closed="left")],
        "batches_per_epoch": [None, Interval(Integral, 1, None, closed="left")],
        "validation_fraction": [None, Interval(Real, 0, 1, closed="neither")],
        "validation_split": [StrOptions({"class_disjoint", "stratified"})],
        "early_stopping": ["boolean"],
        "patience": [Interval(Integral, 1, None, closed="left")],
        "checkpoint_path": [None, str, os.PathLike],
        "warm_start": ["boolean"],
        "device": [str, torch.device],
        "amp": [StrOptions({"bf16", "fp16"}), Options(bool, {False}), None],
        "num_workers": [Interval(Integral, 0, None, closed="left")],
        "pin_memory": [StrOptions({"auto"}), "boolean"],
        "transform_batch_size": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(self, backbone=None, *, embedding_dim=128, normalize=True, loss="binomial",
                 loss_params=None, regularizer=None, regularizer_weight=0.0,
                 regularizer_params=None, jrs_layers=None, optimizer="adam", lr=1e-4,
                 head_lr_mult=10.0, weight_decay=2e-4, param_groups=None, max_epochs=20,
                 n_classes_per_batch="auto", n_samples_per_class=4, batches_per_epoch=None,
                 validation_fraction=None, validation_split="class_disjoint",
                 early_stopping=False, patience=5, checkpoint_path=None, warm_start=False,
                 device="auto", amp=False, num_workers=0, pin_memory="auto",
                 transform_batch_size=256, random_state=None, verbose=0):
        self.backbone = backbone
        self.embedding_dim = embedding_dim
        self.normalize = normalize
        self.loss = loss
        self.loss_params = loss_params
        self.regularizer = regularizer
        self.regularizer_weight = regularizer_weight
        self.regularizer_params = regularizer_params
        self.jrs_layers = jrs_layers
        self.optimizer = optimizer
        self.lr = lr
        self.head_lr_mult = head_lr_mult
        self.weight_decay = weight_decay
        self.param_groups = param_groups
        self.max_epochs = max_epochs
        self.n_classes_per_batch = n_classes_per_batch
        self.n_samples_per_class = n_samples_per_class
        self.batches_per_epoch = batches_per_epoch
        self.validation_fraction = validation_fraction
        self.validation_split = validation_split
        self.early_stopping = early_stopping
        self.patience = patience
        self.checkpoint_path = checkpoint_path
        self.warm_start = warm_start
        self.device = device
        self.amp = amp
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.transform_batch_size = transform_batch_size
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ sklearn plumbing
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.input_tags.allow_nan = False
        tags.transformer_tags.preserves_dtype = ["float32"]  # embeddings are always float32
        return tags

    @property
    def _n_features_out(self):
        return self.embedding_dim

    def __getstate__(self):
        state = self.__dict__.copy()
        for key, value in list(state.items()):
            if isinstance(value, nn.Module):
                state[key] = _module_cpu_copy(value)
        if "_resume_state" in state:
            state["_resume_state"] = _to_cpu(state["_resume_state"])
        if "device_" in state:
            state["_fitted_device"] = str(state["device_"])
            state["device_"] = torch.device("cpu")
        return state

    def __setstate__(self, state):
        fitted_device = state.pop("_fitted_device", None)
        self.__dict__.update(state)
        # A model fitted on a GPU goes back there when one is present; else it stays on CPU.
        if fitted_device is not None and fitted_device.startswith("cuda") \
                and torch.cuda.is_available():
            device = torch.device(fitted_device)
            for key, value in list(self.__dict__.items()):
                if isinstance(value, nn.Module):
                    value.to(device)
            self.device_ = device

    # ------------------------------------------------------------------ data handling
    def _validate_fit_input(self, X, y):
        """Return (source, y_raw, input_shape) where source is a tensor or Dataset."""
        if isinstance(X, Dataset):
            n = len(X)
            if n == 0:
                raise ValueError("The training Dataset is empty.")
            if y is None:
                targets = getattr(X, "targets", None)
                if targets is not None:
                    y = np.asarray(targets.cpu() if isinstance(targets, torch.Tensor) else targets)
                else:
                    labels = []
                    for i in range(n):
                        item = X[i]
                        if not isinstance(item, (tuple, list)) or len(item) < 2:
                            raise ValueError(
                                "Labels are missing: pass y, give the Dataset a `targets` "
                                "attribute, or make it yield (x, y) pairs.")
                        lab = item[1]
                        labels.append(lab.item() if isinstance(lab, torch.Tensor) else lab)
                    y = np.asarray(labels)
            y = np.asarray(y)
            if y.ndim != 1 or y.shape[0] != n:
                raise ValueError(f"Expected {n} labels for the Dataset, got shape {y.shape}.")
            input_shape = _sample_rank_check(_first_item_shape(X), "Dataset items")
            check_classification_targets(y)
            return X, y, input_shape
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None: "
                "labels are missing.")
        X, y = validate_data(self, X, y, allow_nd=True, dtype=np.float32)
        check_classification_targets(y)
        input_shape = _sample_rank_check(X.shape[1:])
        X = torch.from_numpy(np.ascontiguousarray(X)).reshape((X.shape[0],) + input_shape)
        return X, y, input_shape

    def _validate_transform_input(self, X):
        if isinstance(X, Dataset):
            if len(X) == 0:
                raise ValueError("The Dataset to transform is empty.")
            shape = _sample_rank_check(_first_item_shape(X), "Dataset items")
            if shape != self.input_shape_:
                raise ValueError(f"Dataset items have shape {shape}, the model was fitted on "
                                 f"{self.input_shape_}.")
            return X
        X = validate_data(self, X, reset=False, allow_nd=True, dtype=np.float32)
        shape = _sample_rank_check(X.shape[1:])
        if shape != self.input_shape_:
            raise ValueError(f"X has samples of shape {shape}, the model was fitted on "
                             f"{self.input_shape_}.")
        return torch.from_numpy(np.ascontiguousarray(X)).reshape((X.shape[0],) + shape)

    def _pin(self, device):
        return device.type == "cuda" if self.pin_memory == "auto" else bool(self.pin_memory)

    def _autocast(self, device):
        if not self.amp:
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.amp == "bf16" else torch.float16
        return torch.autocast(device_type=device.type, dtype=dtype)

    def _loader(self, source, indices, device, batch_sampler=None):
        """DataLoader over ``source[indices]`` (sequential) or driven by ``batch_sampler``.

        In-memory arrays are fetched a whole batch at a time (``batch_size=None`` with a
        sampler yielding index arrays); user Datasets item by item with default collation.
        """
        if batch_sampler is None:
            size = self.transform_batch_size
            batch_sampler = [indices[i:i + size] for i in range(0, len(indices), size)]
        common = dict(num_workers=self.num_workers, pin_memory=self._pin(device))
        if isinstance(source, torch.Tensor):
            return DataLoader(_IndexedArray(source), sampler=batch_sampler, batch_size=None,
                              **common)
        return DataLoader(_IndexedDataset(source), batch_sampler=_ListSampler(batch_sampler),
                          **common)

    @staticmethod
    def _to_input(xb, device, input_shape):
        xb = xb.to(device, non_blocking=True)
        if xb.dtype != torch.float32:
            xb = xb.float()
        if xb.ndim == len(input_shape):  # grey images (n, H, W) from a Dataset
            xb = xb.unsqueeze(1)
        return xb

    def _embed(self, net, source, indices, device, input_shape):
        """Embeddings of ``source[indices]`` in eval mode, no grad, float32 numpy."""
        was_training = net.training
        net.eval()
        out = []
        try:
            with torch.inference_mode():
                for xb, _ in self._loader(source, indices, device):
                    with self._autocast(device):
                        z, _aux, _f = net(self._to_input(xb, device, input_shape))
                    out.append(z.float().cpu())
        finally:
            net.train(was_training)
        if not out:
            return np.zeros((0, self.embedding_dim), dtype=np.float32)
        return torch.cat(out).numpy()

    # ------------------------------------------------------------------ building blocks
    def _build_backbone(self, input_shape):
        if self.backbone is None:
            return default_backbone(input_shape)
        if isinstance(self.backbone, nn.Module):
            return copy.deepcopy(self.backbone)
        module = self.backbone(input_shape)
        if not isinstance(module, nn.Module):
            raise ValueError(f"The backbone builder returned {type(module).__name__}, "
                             "not a torch.nn.Module.")
        return module

    def _build_loss(self, n_classes):
        from ..losses import get_loss

        params = dict(self.loss_params or {})
        loss = self.loss
        if isinstance(loss, str) or isinstance(loss, type):
            target = loss if isinstance(loss, type) else None
            if isinstance(loss, str) and loss == "amsoftmax":
                params.setdefault("n_classes", n_classes)
                params.setdefault("embedding_dim", self.embedding_dim)
            elif target is not None:
                sig = inspect.signature(target)
                if "n_classes" in sig.parameters:
                    params.setdefault("n_classes", n_classes)
                if "embedding_dim" in sig.parameters:
                    params.setdefault("embedding_dim", self.embedding_dim)
            return target(**params) if target is not None else get_loss(loss, **params)
        if params:
            raise ValueError("loss_params is only used when loss is a name or a class.")
        return copy.deepcopy(loss) if isinstance(loss, nn.Module) else loss

    def _build_regularizer(self):
        if self.regularizer is None or self.regularizer_weight == 0:
            return None
        if callable(self.regularizer):
            return copy.deepcopy(self.regularizer) if isinstance(
                self.regularizer, nn.Module) else self.regularizer
        from ..losses import get_regularizer

        return get_regularizer(self.regularizer, **(self.regularizer_params or {}))

    def _build_optimizer(self, net, loss):
        named = [(f"{name}", p) for name, p in net.named_parameters()]
        if isinstance(loss, nn.Module):
            named += [(f"loss.{name}", p) for name, p in loss.named_parameters()]
        patterns = list(self.param_groups or [])
        for entry in patterns:
            if not (isinstance(entry, (tuple, list)) and len(entry) == 2
                    and isinstance(entry[0], str) and isinstance(entry[1], dict)):
                raise ValueError("param_groups must be a list of (pattern, dict) pairs, got "
                                 f"{entry!r}.")
        groups = {}
        for name, p in named:
            if not p.requires_grad:
                continue
            is_head = not name.startswith("backbone.")
            options = {"lr": self.lr * (self.head_lr_mult if is_head else 1.0)}
            key = ("head" if is_head else "backbone", None)
            for i, (pattern, opts) in enumerate(patterns):
                if fnmatchcase(name, pattern):
                    options.update(opts)
                    key = (key[0], i)
                    break
            groups.setdefault(key, {"params": [], **options})["params"].append(p)
        if not groups:
            raise ValueError("The network has no trainable parameters.")
        opt_cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
                   "sgd": torch.optim.SGD}.get(self.optimizer, self.optimizer)
        kwargs = {"lr": self.lr, "weight_decay": self.weight_decay}
        if self.optimizer == "sgd":
            kwargs["momentum"] = 0.9
        return opt_cls(list(groups.values()), **kwargs)

    def _validation_split(self, y_enc, n_classes, rng):
        fraction = self.validation_fraction
        if fraction is None:
            fraction = 0.1 if self.early_stopping else None
        n = len(y_enc)
        if fraction is None:
            return np.arange(n), None
        if self.validation_split == "class_disjoint":
            n_val = max(2, int(round(fraction * n_classes)))
            if n_classes - n_val < 2:
                raise ValueError(
                    f"A class-disjoint validation split needs at least 2 classes on each side; "
                    f"{n_classes} classes with validation_fraction={fraction} leave "
                    f"{n_classes - n_val} for training.")
            from ..model_selection import ClassDisjointSplit

            splitter = ClassDisjointSplit(n_splits=1, test_size=n_val,
                                          random_state=rng.randint(0, 2**31 - 1))
            return next(splitter.split(np.zeros((n, 1)), y_enc))
        train, val = train_test_split(np.arange(n), test_size=fraction, stratify=y_enc,
                                      random_state=rng.randint(0, 2**31 - 1))
        return np.sort(train), np.sort(val)

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Train the network on ``X`` (arrays or a torch ``Dataset``) with labels ``y``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), (n_samples, H, W), \
(n_samples, C, H, W) or torch.utils.data.Dataset
            Training inputs. A ``Dataset`` yields ``x`` or ``(x, label)``; its labels
            come from ``y`` if given, else its ``targets`` attribute, else one pass
            over it.
        y : array-like of shape (n_samples,)
            Class labels (required for arrays).

        Returns
        -------
        self : DeepMetricTransformer
            The fitted estimator.
        """
        with torch_threads():
            self._fit(X, y)
        return self

    def _fit(self, X, y):
        source, y, input_shape = self._validate_fit_input(X, y)
        classes, y_enc = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(
                f"Metric learning needs at least 2 classes; the labels hold {len(classes)} "
                "class (1 class).")
        device = resolve_device(self.device)
        rng = check_random_state(self.random_state)
        train_idx, val_idx = self._validation_split(y_enc, len(classes), rng)
        y_train = y_enc[train_idx]
        n_train_classes = len(np.unique(y_train))
        if self.n_classes_per_batch == "auto":
            P = min(_AUTO_CLASSES_PER_BATCH, n_train_classes)
        else:
            P = int(self.n_classes_per_batch)
            if P > n_train_classes:
                raise ValueError(
                    f"The batch plan cannot be met: n_classes_per_batch={P} but the training "
                    f"data hold only {n_train_classes} classes. Lower n_classes_per_batch or "
                    "use 'auto'.")
        seed = torch_seed(rng)
        checkpoint = self._load_resume_state(classes, input_shape)
        fork_devices = [device.index or 0] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=fork_devices):
            torch.manual_seed(seed)
            self._train(source, y_enc, classes, input_shape, train_idx, val_idx, P, rng,
                        device, checkpoint)

    def _load_resume_state(self, classes, input_shape):
        if not self.warm_start:
            return None
        state = None
        if self.checkpoint_path is not None and os.path.exists(self.checkpoint_path):
            state = torch.load(self.checkpoint_path, map_location="cpu", weights_only=False)
        elif hasattr(self, "_resume_state") and hasattr(self, "module_"):
            state = self._resume_state
        if state is None:
            return None
        if not np.array_equal(np.asarray(state["classes"]), classes) or \
                tuple(state["input_shape"]) != tuple(input_shape):
            raise ValueError("warm_start: the checkpoint was trained on other classes or input "
                             "shapes than the data passed to fit.")
        return state

    def _train(self, source, y_enc, classes, input_shape, train_idx, val_idx, P, rng, device,
               checkpoint):
        n_classes = len(classes)
        # network: backbone + head, output size from a dry forward pass (eval mode: BN safe)
        backbone = self._build_backbone(input_shape)
        probe_idx = train_idx[:2]
        xb, _ = next(iter(self._loader(source, probe_idx, torch.device("cpu"))))
        backbone.eval()
        with torch.no_grad():
            out = backbone(self._to_input(xb, torch.device("cpu"), input_shape))
        feats = out[0] if isinstance(out, (tuple, list)) else out
        net = EmbeddingNet(backbone, feats.flatten(1).shape[1], self.embedding_dim,
                           self.normalize).to(device)
        loss_fn = self._build_loss(n_classes)
        if isinstance(loss_fn, nn.Module):
            loss_fn.to(device)
        reg_fn = self._build_regularizer()
        if isinstance(reg_fn, nn.Module):
            reg_fn.to(device)
        hooked = []
        if self.regularizer == "jrs" and reg_fn is not None and self.jrs_layers is not None:
            hooked = match_modules(net.backbone, self.jrs_layers)
        optimizer = self._build_optimizer(net, loss_fn)
        use_scaler = self.amp == "fp16"
        scaler = torch.amp.GradScaler(device.type, enabled=use_scaler)
        sampler = ClassBalancedBatchSampler(y_enc[train_idx], P, self.n_samples_per_class, rng,
                                            n_batches=self.batches_per_epoch)
        # sampler yields positions into train_idx: map them back to source indices
        train_sampler = _MappedSampler(sampler, train_idx)
        y_t = torch.as_tensor(y_enc, dtype=torch.long)

        history, start_epoch = [], 0
        best = {"score": -np.inf, "epoch": None, "state": None, "bad": 0, "stopped": False}
        if checkpoint is not None:
            net.load_state_dict(checkpoint["model"])
            if isinstance(loss_fn, nn.Module) and checkpoint.get("loss") is not None:
                loss_fn.load_state_dict(checkpoint["loss"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            if checkpoint["scaler"]:
                scaler.load_state_dict(checkpoint["scaler"])
            rng.set_state(checkpoint["numpy_rng"])
            torch.set_rng_state(checkpoint["torch_rng"])
            if device.type == "cuda" and checkpoint.get("cuda_rng") is not None:
                torch.cuda.set_rng_state(checkpoint["cuda_rng"], device)
            history = copy.deepcopy(checkpoint["history"])
            start_epoch = int(checkpoint["epoch"])
            best = copy.deepcopy(checkpoint["best"])

        # the estimator holds the (always finite) network while training
        self.module_, self.loss_, self.classes_ = net, loss_fn, classes
        self.input_shape_, self.device_ = tuple(input_shape), device
        self.history_, self.n_iter_ = history, start_epoch
        val_y = y_enc[val_idx] if val_idx is not None else None
        n_batches = len(sampler)
        end_epoch = start_epoch if best["stopped"] else self.max_epochs
        if start_epoch >= self.max_epochs and checkpoint is not None and self.verbose:
            print(f"warm_start: already trained for {start_epoch} epochs >= max_epochs.")
        header_done = False
        capture = LayerCapture(net.backbone, hooked)
        with capture:
            for epoch in range(start_epoch, end_epoch):
                t0 = time.perf_counter()
                net.train()
                if isinstance(loss_fn, nn.Module):
                    loss_fn.train()
                sums = {}
                loader = self._loader(source, None, device, batch_sampler=train_sampler)
                for step, (xb, idx) in enumerate(loader):
                    xb = self._to_input(xb, device, input_shape)
                    yb = y_t[idx].to(device, non_blocking=True)
                    with self._autocast(device):
                        z, aux, feats = net(xb)
                        reps = capture.representations() if hooked else None
                    z = z.float()
                    metric = loss_fn(z, yb)
                    terms = {"metric_loss": metric}
                    total = metric
                    if reg_fn is not None:
                        if self.regularizer == "ec":
                            reg = reg_fn(net.embed(feats.detach().float()).float(), yb)
                        elif self.regularizer == "jrs":
                            layers = [r.float() for r in reps] if hooked else [feats.float()]
                            layers.append(z)
                            if hasattr(loss_fn, "class_cosines"):
                                layers.append(loss_fn.class_cosines(z).float())
                            reg = reg_fn(layers, yb)
                        else:
                            reg = reg_fn(z, yb)
                        terms["regularizer"] = reg
                        total = total + self.regularizer_weight * reg
                    if aux is not None:
                        items = aux.items() if isinstance(aux, dict) else [("", aux)]
                        for key, value in items:
                            value = value.float()
                            if value.ndim:
                                value = value.sum()
                            terms[f"aux_{key}" if key else "aux"] = value
                            total = total + value
                    total_value = float(total.detach())
                    if not np.isfinite(total_value):
                        parts = ", ".join(f"{k}={float(v.detach()):.4g}" for k, v in terms.items())
                        raise NonFiniteLossError(
                            f"Non-finite training loss ({total_value}) at epoch {epoch + 1}, "
                            f"step {step + 1}/{n_batches} ({parts}). Training stopped before "
                            "this update; the weights are those of the previous step. Lower lr "
                            "or check the data/loss.")
                    optimizer.zero_grad(set_to_none=True)
                    scaler.scale(total).backward()
                    scaler.step(optimizer)
                    scaler.update()
                    sums["loss"] = sums.get("loss", 0.0) + total_value
                    for k, v in terms.items():
                        sums[k] = sums.get(k, 0.0) + float(v.detach())
                    if self.verbose > 1:
                        _progress(epoch + 1, step + 1, n_batches, sums["loss"] / (step + 1))
                if self.verbose > 1:
                    sys.stdout.write("\n")
                n_done = max(step + 1, 1)
                record = {"epoch": epoch + 1}
                record.update({k: v / n_done for k, v in sums.items()})
                if val_idx is not None:
                    from ..metrics import recall_at_k

                    Zv = self._embed(net, source, val_idx, device, input_shape)
                    score = float(recall_at_k(Zv, val_y, k=1))
                    record["val_recall@1"] = score
                    if score > best["score"]:
                        best.update(score=score, epoch=epoch + 1, bad=0,
                                    state=_snapshot(net, loss_fn) if self.early_stopping
                                    else None)
                    else:
                        best["bad"] += 1
                        if self.early_stopping and best["bad"] >= self.patience:
                            best["stopped"] = True
                record["seconds"] = time.perf_counter() - t0
                history.append(record)
                self.n_iter_ = epoch + 1
                if self.verbose:
                    if not header_done:
                        print(" | ".join(f"{k:>12s}" for k in record))
                        header_done = True
                    print(" | ".join(f"{v:12d}" if isinstance(v, int) else f"{v:12.4f}"
                                     for v in record.values()), flush=True)
                if self.checkpoint_path is not None:
                    _atomic_save(self._state(net, loss_fn, optimizer, scaler, rng, device,
                                             history, epoch + 1, best, classes, input_shape),
                                 self.checkpoint_path)
                if best["stopped"]:
                    if self.verbose:
                        print(f"Early stopping at epoch {epoch + 1}: best val Recall@1 "
                              f"{best['score']:.4f} at epoch {best['epoch']}.")
                    break
        if self.early_stopping and best["state"] is not None:
            net.load_state_dict(best["state"]["model"])
            if isinstance(loss_fn, nn.Module) and best["state"]["loss"] is not None:
                loss_fn.load_state_dict(best["state"]["loss"])
        net.eval()
        if isinstance(loss_fn, nn.Module):
            loss_fn.eval()
        self.history_ = history
        self.best_epoch_ = best["epoch"]
        self.best_score_ = None if best["epoch"] is None else best["score"]
        self._resume_state = self._state(net, loss_fn, optimizer, scaler, rng, device, history,
                                         self.n_iter_, best, classes, input_shape)

    def _state(self, net, loss_fn, optimizer, scaler, rng, device, history, epoch, best,
               classes, input_shape):
        return {
            "model": net.state_dict(),
            "loss": loss_fn.state_dict() if isinstance(loss_fn, nn.Module) else None,
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict() if scaler.is_enabled() else None,
            "numpy_rng": rng.get_state(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            "epoch": int(epoch),
            "history": copy.deepcopy(history),
            "best": best,
            "classes": classes,
            "input_shape": tuple(input_shape),
        }

    # ------------------------------------------------------------------ transform
    def transform(self, X):
        """Embed ``X`` in batches, in eval mode, without gradients.

        Parameters
        ----------
        X : array-like of the fitted sample shape, or torch.utils.data.Dataset
            A ``Dataset`` may yield ``x`` or ``(x, y)``.

        Returns
        -------
        Z : ndarray of shape (n_samples, embedding_dim), dtype float32
            The embeddings.
        """
        check_is_fitted(self, "module_")
        source = self._validate_transform_input(X)
        with torch_threads():
            return self._embed(self.module_, source, np.arange(len(source)), self.device_,
                               self.input_shape_)


class _MappedSampler:
    """Maps batches of positions in the training subset to indices of the full source."""

    def __init__(self, sampler, index):
        self.sampler, self.index = sampler, np.asarray(index)

    def __len__(self):
        return len(self.sampler)

    def __iter__(self):
        for batch in self.sampler:
            yield self.index[batch]


def _snapshot(net, loss_fn):
    return {"model": {k: v.detach().clone() for k, v in net.state_dict().items()},
            "loss": {k: v.detach().clone() for k, v in loss_fn.state_dict().items()}
            if isinstance(loss_fn, nn.Module) else None}


def _progress(epoch, step, n_steps, loss):
    width = 30
    done = int(width * step / max(n_steps, 1))
    sys.stdout.write(f"\repoch {epoch:3d} [{'=' * done}{' ' * (width - done)}] "
                     f"{step}/{n_steps} loss {loss:.4f}")
    sys.stdout.flush()
