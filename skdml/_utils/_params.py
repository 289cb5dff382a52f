"""Parameter checks of constructors outside scikit-learn's estimator machinery.

Estimators declare ``_parameter_constraints`` and scikit-learn validates them at
``fit``; torch modules (losses, backbones) and factory functions check their
arguments when called, with the same constraint objects, through
:func:`check_params`. :class:`StrictInterval` is scikit-learn's ``Interval``
without its one surprise: a ``bool`` is not a number here (``True`` is not
``n_components=1``).

:class:`NestedParamsMixin` is the one routing of skorch-style nested parameters
(``optimizer__weight_decay``, ``loss__margin``...) through ``set_params``, for
every learner that takes grouped options: a nested key is checked when it is
set and lands in the one parameter that holds it, so ``get_params``, ``clone``
and ``GridSearchCV`` see nothing new.
"""

from __future__ import annotations

import inspect
from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, make_constraint

__all__ = ["NestedParamsMixin", "StrictInterval", "check_params", "constructor_keys",
           "loss_keys", "non_negative_real", "positive_int", "rebuild_with"]


class StrictInterval(Interval):
    """:class:`sklearn.utils._param_validation.Interval` that refuses booleans.

    Examples
    --------
    >>> from numbers import Integral
    >>> StrictInterval(Integral, 1, None, closed="left").is_satisfied_by(True)
    False
    >>> StrictInterval(Integral, 1, None, closed="left").is_satisfied_by(3)
    True
    """

    def is_satisfied_by(self, val):
        return not isinstance(val, (bool, np.bool_)) and super().is_satisfied_by(val)


def positive_int():
    """The constraint "an int >= 1" (booleans refused)."""
    return StrictInterval(Integral, 1, None, closed="left")


def non_negative_real():
    """The constraint "a real >= 0" (booleans and NaN refused)."""
    return StrictInterval(Real, 0, None, closed="left")


def positive_real():
    """The constraint "a finite real > 0" (booleans, NaN and infinity refused)."""
    return StrictInterval(Real, 0, None, closed="neither")


def finite_real():
    """The constraint "a finite real" (booleans, NaN and infinity refused)."""
    return StrictInterval(Real, None, None, closed="neither")


def check_params(owner, constraints, values):
    """Raise a ``ValueError`` naming ``owner`` and the parameter unless every value is allowed.

    Parameters
    ----------
    owner : str
        The class or function the parameters belong to (for the message).
    constraints : dict
        ``{name: [constraint, ...]}`` as in ``_parameter_constraints``.
    values : dict
        ``{name: value}``.

    Examples
    --------
    >>> check_params("MLP", {"in_features": [positive_int()]}, {"in_features": 3})
    >>> check_params("MLP", {"in_features": [positive_int()]}, {"in_features": 0})
    Traceback (most recent call last):
    ...
    ValueError: MLP: in_features must be an int in the range [1, inf); got 0.
    """
    for name, value in values.items():
        allowed = [make_constraint(c) for c in constraints[name]]
        if any(c.is_satisfied_by(value) for c in allowed):
            continue
        what = " or ".join(str(c) for c in allowed)
        raise ValueError(f"{owner}: {name} must be {what}; got {value!r}.")


def constructor_keys(target, exclude=()):
    """The keyword arguments ``target(...)`` names (a sorted list), or ``None`` for ``**kwargs``.

    Examples
    --------
    >>> constructor_keys(lambda margin=0.1, *, scale=2.0: None)
    ['margin', 'scale']
    >>> constructor_keys(lambda a, **rest: None) is None
    True
    """
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):  # no signature to read: accept what the call accepts
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return sorted(p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD,
                                                           p.KEYWORD_ONLY)
                  and p.name not in exclude)


def loss_keys(loss):
    """The options of ``loss`` (a name of the loss registry or a class); ``None``: any.

    The one list of ``loss_params`` keys, checked by ``set_params(loss__<key>=...)``
    and by the fit. Raises a ``ValueError`` when the loss takes no options:
    ``"auto"`` (the learner chooses it) and a loss already built.
    """
    from ..losses import LOSSES  # the losses use this module's checks

    if isinstance(loss, str) and loss == "auto":
        raise ValueError("loss='auto' is chosen by the learner and takes no options: name "
                         "the loss (e.g. loss='lmnn' or loss='binomial') to set loss__<key>.")
    if isinstance(loss, str) and loss not in LOSSES:
        raise ValueError(f"loss={loss!r} is not a loss name; the names are "
                         f"{', '.join(sorted(LOSSES))} (or pass a loss class or module).")
    target = LOSSES.get(loss) if isinstance(loss, str) else loss
    if not isinstance(target, type):
        raise ValueError(f"The loss {type(loss).__name__} is already built: set its options "
                         "when you build it, or pass a name or a class to set loss__<key>.")
    return constructor_keys(target)


def check_loss_params(loss, params):
    """Refuse ``loss_params`` keys the loss does not take (the list ``loss__<key>`` uses).

    A key left over from another loss (``set_params(loss__margin=...)`` then
    ``loss="npair"``) gets a ``ValueError`` naming the loss's keys, not the
    constructor's ``TypeError``.
    """
    if not params or not isinstance(loss, (str, type)):
        return  # a built loss with loss_params is refused by build_loss
    valid = loss_keys(loss)
    unknown = [] if valid is None else sorted(set(params) - set(valid))
    if unknown:
        raise ValueError(f"Invalid loss_params: the loss {loss!r} does not accept {unknown}; "
                         f"its keys are {valid}.")


def rebuild_with(obj, **options):
    """A new ``type(obj)`` with ``obj``'s constructor options and ``options`` over them.

    The options are read back from attributes of the same names, as
    scikit-learn's ``get_params`` does; an object that does not keep one
    raises a ``ValueError``.
    """
    keys = constructor_keys(type(obj)) or []
    missing = [k for k in keys if not hasattr(obj, k)]
    if missing:
        raise ValueError(f"{type(obj).__name__} does not keep its options {missing} as "
                         "attributes: build it with the options you want instead.")
    return type(obj)(**{**{k: getattr(obj, k) for k in keys}, **options})


class NestedParamsMixin:
    """skorch-style nested parameters: ``set_params(prefix__key=value)``.

    ``_nested_params`` maps each prefix to where its keys go:

    - the name of a ``dict`` parameter (``"optimizer": "optimizer_params"``):
      the key is set in a new copy of that dict;
    - a dict ``{key: parameter}`` (``"loss": {"margin": "margin"}``): the key
      is another name of that parameter;
    - ``"loss_params"``: the options of the loss named by the ``loss``
      parameter (:func:`loss_keys`, from the loss registry);
    - ``"<instance>"``: the parameter of the prefix's name holds a name, a
      class or an instance, and the key is an option of that object
      (:meth:`_set_nested_option` builds the object with it).

    :meth:`_nested_keys` lists the keys a prefix takes now (``None``: any);
    an unknown key raises a ``ValueError`` at ``set_params`` that names the
    valid ones. Plain parameters of the same call are set first (so
    ``set_params(loss="triplet", loss__margin=0.2)`` checks ``margin``
    against the triplet loss), and nothing is set when a key is refused.
    The values live in ordinary parameters, so ``get_params`` and ``clone``
    round-trip and ``GridSearchCV`` searches nested keys like any other.
    """

    _nested_params: dict = {}

    def _nested_keys(self, prefix):
        """The keys ``prefix__<key>`` takes now, or ``None`` for any; raise ``ValueError`` if none."""
        route = self._nested_params[prefix]
        if isinstance(route, dict):
            return sorted(route)
        return loss_keys(self.loss) if route == "loss_params" else None

    def _set_nested_option(self, prefix, key, value):  # pragma: no cover - "<instance>" routes
        raise NotImplementedError

    def set_params(self, **params):
        """Set the parameters of this estimator, nested ``prefix__key`` ones included.

        Parameters
        ----------
        **params : dict
            Estimator parameters, and nested keys of the grouped ones (see
            the class's parameters).

        Returns
        -------
        self : estimator instance
            Estimator instance.
        """
        routes = type(self)._nested_params
        nested, plain = [], {}
        for name, value in params.items():
            prefix, sep, key = name.partition("__")
            if sep and prefix in routes:
                nested.append((prefix, key, value))
            else:
                plain[name] = value
        if not nested:
            return super().set_params(**plain)
        # checked on a shallow copy first (no pickling hooks: a fitted network is not
        # copied), so that a refused key changes nothing
        probe = object.__new__(type(self))
        probe.__dict__.update(self.__dict__)
        super(NestedParamsMixin, probe).set_params(**plain)
        for prefix, key, value in nested:
            probe._set_nested(prefix, key, value)
        super().set_params(**plain)
        for prefix, key, value in nested:
            self._set_nested(prefix, key, value)
        return self

    def _set_nested(self, prefix, key, value):
        valid = self._nested_keys(prefix)
        if valid is not None and key not in valid:
            raise ValueError(
                f"Invalid parameter {prefix}__{key!s} for estimator {type(self).__name__}. "
                f"Valid {prefix}__ keys are {[f'{prefix}__{k}' for k in valid]}.")
        route = self._nested_params[prefix]
        if isinstance(route, dict):
            setattr(self, route[key], value)
        elif route == "<instance>":
            self._set_nested_option(prefix, key, value)
        else:
            setattr(self, route, {**(getattr(self, route) or {}), key: value})
