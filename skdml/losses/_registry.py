"""The one place where loss and regulariser names are resolved, for every learner."""

from __future__ import annotations

import copy
import inspect

from torch import nn

from .._utils._params import check_loss_params
from .amsoftmax import AMSoftmaxLoss
from .binomial import BinomialDevianceLoss
from .energy_confusion import EnergyConfusion
from .jrs import JRSRegularizer
from .lmnn import LMNNLoss
from .multisimilarity import MultiSimilarityLoss
from .npair import NPairLoss
from .triplet import TripletLoss

__all__ = ["LOSSES", "REGULARIZERS", "build_loss", "get_loss", "get_regularizer"]

#: Loss names accepted by every skdml learner and by :func:`get_loss`.
LOSSES = {
    "triplet": TripletLoss,
    "npair": NPairLoss,
    "binomial": BinomialDevianceLoss,
    "amsoftmax": AMSoftmaxLoss,
    "lmnn": LMNNLoss,
    "multisimilarity": MultiSimilarityLoss,
}

#: Regulariser names accepted by every skdml learner and by :func:`get_regularizer`.
REGULARIZERS = {
    "ec": EnergyConfusion,
    "jrs": JRSRegularizer,
}


def _resolve(obj, table, kind, kwargs):
    if isinstance(obj, str):
        if obj not in table:
            raise ValueError(
                f"Unknown {kind} {obj!r}; valid names are {sorted(table)} "
                f"(or pass a callable f(embeddings, labels) -> scalar tensor)."
            )
        return table[obj](**kwargs)
    if isinstance(obj, type):
        if not issubclass(obj, nn.Module):
            raise ValueError(f"A {kind} class must be a torch.nn.Module subclass, got {obj!r}.")
        return obj(**kwargs)
    if callable(obj):
        if kwargs:
            raise ValueError(
                f"Parameters {sorted(kwargs)} were given for a {kind} that is already built "
                f"({type(obj).__name__} instance); pass a name or a class to have them used.")
        return obj
    raise ValueError(f"{kind} must be one of {sorted(table)} or a callable, got {obj!r}.")


def get_loss(loss, **kwargs):
    """Resolve a loss name or class to a fresh instance; a built callable is returned unchanged.

    Parameters
    ----------
    loss : str, callable or nn.Module subclass
        One of :data:`LOSSES` (``"triplet"``, ``"npair"``, ``"binomial"``,
        ``"amsoftmax"``, ``"lmnn"``, ``"multisimilarity"``); or any callable
        ``loss(embeddings, labels) -> scalar tensor`` (e.g. a
        pytorch-metric-learning loss), returned as is; or an
        ``nn.Module`` class, instantiated with ``kwargs``.
    **kwargs
        Constructor arguments (``"amsoftmax"`` needs ``n_classes`` and
        ``embedding_dim``). Refused for an already built callable.

    Returns
    -------
    loss : callable

    Examples
    --------
    >>> from skdml.losses import get_loss
    >>> get_loss("triplet", margin=0.2)
    TripletLoss(margin=0.2, reduction='mean')
    >>> get_loss("amsoftmax", n_classes=3, embedding_dim=4)
    AMSoftmaxLoss(n_classes=3, embedding_dim=4, scale=20.0, margin=0.1, reduction='mean')
    """
    return _resolve(loss, LOSSES, "loss", kwargs)


def get_regularizer(regularizer, **kwargs):
    """Resolve a regulariser name (``"ec"``, ``"jrs"``) to a fresh instance with skdml's defaults.

    The same defaults serve the linear and the deep learners: Energy Confusion
    in its log form averaged over the ordered class pairs of a batch, JRS
    averaged over the pairs of samples of different classes.

    Parameters
    ----------
    regularizer : str, callable, nn.Module subclass or None
        ``"ec"`` -> :class:`EnergyConfusion`, ``"jrs"`` -> :class:`JRSRegularizer`;
        a built callable is returned unchanged; ``None`` returns ``None``.
    **kwargs
        Constructor arguments.

    Returns
    -------
    regularizer : callable or None

    Examples
    --------
    >>> from skdml.losses import get_regularizer
    >>> get_regularizer("ec", log=False)
    EnergyConfusion(log=False, reduction='mean')
    """
    if regularizer is None:
        return None
    return _resolve(regularizer, REGULARIZERS, "regularizer", kwargs)


def build_loss(loss, params=None, *, n_classes=None, embedding_dim=None):
    """Build a learner's loss: a name or class gets ``params`` plus the fit's sizes.

    ``n_classes`` and ``embedding_dim`` are passed to a loss whose constructor
    takes them (proxy losses such as AM-Softmax), unless ``params`` sets them.
    An ``nn.Module`` instance is deep-copied, so that fits never share state.

    Parameters
    ----------
    loss : str, loss class or nn.Module
        A registered name (see :data:`LOSSES`), a class, or a built loss.
    params : dict, default=None
        Constructor parameters of a named or class loss (refused for a built one).
    n_classes : int, default=None
        Classes of the fit, passed to a loss whose constructor takes them.
    embedding_dim : int, default=None
        Embedding width, passed to a loss whose constructor takes it.

    Returns
    -------
    loss : nn.Module
        The built loss (a copy of a given module).

    Examples
    --------
    >>> build_loss("amsoftmax", {"margin": 0.2}, n_classes=3, embedding_dim=2)
    AMSoftmaxLoss(n_classes=3, embedding_dim=2, scale=20.0, margin=0.2, reduction='mean')
    """
    params = dict(params or {})
    if params and not isinstance(loss, (str, type)):
        raise ValueError(
            f"loss_params={params} is only used when loss is a name or a class; the loss "
            f"{type(loss).__name__} is already built (set its parameters when you build it).")
    target = LOSSES.get(loss) if isinstance(loss, str) else loss if isinstance(loss, type) \
        else None
    if target is not None:
        check_loss_params(loss, params)
        signature = inspect.signature(target)
        if "n_classes" in signature.parameters and n_classes is not None:
            params.setdefault("n_classes", n_classes)
        if "embedding_dim" in signature.parameters and embedding_dim is not None:
            params.setdefault("embedding_dim", embedding_dim)
    built = get_loss(loss, **params)
    return copy.deepcopy(built) if built is loss and isinstance(loss, nn.Module) else built
