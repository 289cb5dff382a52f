"""Parameter checks of constructors outside scikit-learn's estimator machinery.

Estimators declare ``_parameter_constraints`` and scikit-learn validates them at
``fit``; torch modules (losses, backbones) and factory functions check their
arguments when called, with the same constraint objects, through
:func:`check_params`. :class:`StrictInterval` is scikit-learn's ``Interval``
without its one surprise: a ``bool`` is not a number here (``True`` is not
``n_components=1``).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, make_constraint

__all__ = ["StrictInterval", "check_params", "non_negative_real", "positive_int"]


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
