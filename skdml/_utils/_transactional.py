"""Transactional fits: a fit that does not finish leaves the estimator as it was."""

from __future__ import annotations

import functools

__all__ = ["transactional_fit"]


def transactional_fit(method):
    """Decorate ``fit`` (or ``partial_fit``): on any exception, put the attributes back.

    scikit-learn's ``validate_data`` sets ``n_features_in_`` at the start of a
    fit, and a learner may set more along the way; a fit that then fails or is
    interrupted (an error, a non-finite loss, Ctrl-C) would leave a fresh
    estimator looking fitted to ``check_is_fitted`` while ``components_`` is
    missing. The decorated method restores the instance's ``__dict__`` to its
    state at the call, so a fresh estimator stays unfitted (``transform``
    raises ``NotFittedError``) and a fitted one keeps its previous model.

    Examples
    --------
    >>> class Learner:
    ...     @transactional_fit
    ...     def fit(self, X):
    ...         self.n_features_in_ = len(X[0])
    ...         raise KeyboardInterrupt
    >>> est = Learner()
    >>> try:
    ...     est.fit([[1.0, 2.0]])
    ... except KeyboardInterrupt:
    ...     pass
    >>> hasattr(est, "n_features_in_")
    False
    """
    @functools.wraps(method)
    def fit(self, *args, **kwargs):
        before = dict(self.__dict__)
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(before)
            raise

    return fit
