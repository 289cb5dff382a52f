"""Name -> loss / regulariser resolution used by the estimators."""

from __future__ import annotations

from torch import nn

from .amsoftmax import AMSoftmaxLoss
from .binomial import BinomialDevianceLoss
from .energy_confusion import EnergyConfusion
from .jrs import JRSRegularizer
from .npair import NPairLoss
from .triplet import TripletLoss

__all__ = ["LOSSES", "REGULARIZERS", "get_loss", "get_regularizer"]

#: Loss names accepted by :func:`get_loss` (aliases map to the same class).
LOSSES = {
    "triplet": TripletLoss,
    "npair": NPairLoss,
    "n-pair": NPairLoss,
    "npairs": NPairLoss,
    "binomial": BinomialDevianceLoss,
    "binomial_deviance": BinomialDevianceLoss,
    "amsoftmax": AMSoftmaxLoss,
    "am-softmax": AMSoftmaxLoss,
    "cosface": AMSoftmaxLoss,
}

#: Regulariser names accepted by :func:`get_regularizer`.
REGULARIZERS = {
    "ec": EnergyConfusion,
    "energy_confusion": EnergyConfusion,
    "jrs": JRSRegularizer,
}


def _resolve(obj, table, kind, kwargs):
    if isinstance(obj, str):
        key = obj.lower()
        if key not in table:
            raise ValueError(
                f"Unknown {kind} {obj!r}; valid names are {sorted(table)} "
                f"(or pass a callable f(embeddings, labels) -> scalar tensor)."
            )
        return table[key](**kwargs)
    if isinstance(obj, type) and issubclass(obj, nn.Module):
        return obj(**kwargs)
    if callable(obj):
        return obj
    raise ValueError(
        f"{kind} must be one of {sorted(table)} or a callable, got {obj!r}."
    )


def get_loss(loss, **kwargs):
    """Resolve a loss name to a fresh instance; a callable is returned unchanged.

    Parameters
    ----------
    loss : str, callable or nn.Module subclass
        One of ``"triplet"``, ``"npair"``, ``"binomial"``, ``"amsoftmax"``
        (aliases: ``"n-pair"``, ``"npairs"``, ``"binomial_deviance"``,
        ``"am-softmax"``, ``"cosface"``), case-insensitive; or any callable
        ``loss(embeddings, labels) -> scalar tensor`` (e.g. a
        pytorch-metric-learning loss), returned as is (``kwargs`` are then
        ignored); or an ``nn.Module`` class, instantiated with ``kwargs``.
    **kwargs
        Constructor arguments (``"amsoftmax"`` needs ``n_classes`` and
        ``embedding_dim``).

    Returns
    -------
    loss : callable

    Raises
    ------
    ValueError
        For an unknown name (the message lists the valid names).

    Examples
    --------
    >>> from skdml.losses import get_loss
    >>> get_loss("triplet", margin=0.2)
    TripletLoss(margin=0.2, reduction='all')
    >>> get_loss("amsoftmax", n_classes=3, embedding_dim=4)
    AMSoftmaxLoss(n_classes=3, embedding_dim=4, scale=20.0, margin=0.1)
    """
    return _resolve(loss, LOSSES, "loss", kwargs)


def get_regularizer(regularizer, **kwargs):
    """Resolve a regulariser name (``"ec"``, ``"jrs"``) to a fresh instance.

    Parameters
    ----------
    regularizer : str, callable, nn.Module subclass or None
        ``"ec"`` (alias ``"energy_confusion"``) -> :class:`EnergyConfusion`,
        ``"jrs"`` -> :class:`JRSRegularizer`, case-insensitive; a callable is
        returned unchanged; ``None`` returns ``None``.
    **kwargs
        Constructor arguments.

    Returns
    -------
    regularizer : callable or None

    Raises
    ------
    ValueError
        For an unknown name (the message lists the valid names).

    Examples
    --------
    >>> from skdml.losses import get_regularizer
    >>> get_regularizer("ec", log=False)
    EnergyConfusion(log=False, reduction='sum')
    """
    if regularizer is None:
        return None
    return _resolve(regularizer, REGULARIZERS, "regularizer", kwargs)
