"""Warnings that point at the user's line, not at skdml's (or scikit-learn's) internals."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings

__all__ = ["only_thread", "quiet_warnings", "validate_fitted_data", "warn_user"]

#: Frames in these packages are skipped: a warning raised inside ``fit`` (through
#: scikit-learn's ``Pipeline``, whose steps joblib's ``Memory`` calls, ``GridSearchCV`` or
#: skdml's own wrappers) is reported at the first line outside them, the line the user
#: wrote. ``contextlib``'s frames too: a warning from a ``with`` block's generator; and
#: ``pickle``'s, ``copy``'s and ``copyreg``'s: joblib's ``dump`` and ``load`` run the
#: pure-Python pickler, whose frames lie between the user's line and skdml's
#: ``__reduce__`` or ``__setstate__``.
_INTERNAL = tuple(os.path.dirname(__import__(name).__file__) + os.sep
                  for name in ("skdml", "sklearn", "joblib")) + tuple(
    __import__(name).__file__ for name in ("contextlib", "pickle", "copy", "copyreg"))


def _user_stacklevel():
    """The ``stacklevel`` of the first frame outside skdml and scikit-learn (for our caller)."""
    frame, level = sys._getframe(2), 2  # 1: warn_user's caller
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 2


def warn_user(message, category=UserWarning):
    """``warnings.warn(message, category)`` attributed to the user's line.

    Examples
    --------
    >>> import warnings
    >>> from skdml._utils import warn_user
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_user("look here")
    >>> caught[0].filename.endswith(".py") or caught[0].filename.startswith("<doctest")
    True
    """
    warnings.warn(message, category, stacklevel=_user_stacklevel())


#: One skdml section at a time may swap the process's warning filters (below).
_FILTERS_LOCK = threading.RLock()


def only_thread():
    """Whether this is the program's only thread (daemon threads aside: tqdm's monitor)."""
    current = threading.current_thread()
    return not any(t is not current and not t.daemon for t in threading.enumerate())


def _may_swap_filters():
    """Whether a ``catch_warnings`` section here cannot undo another thread's.

    Before context-aware warnings (Python 3.14's ``-X context_aware_warnings``),
    ``catch_warnings`` saves and restores process-wide state; scikit-learn's own
    sections (``check_array``: ``simplefilter("error", ComplexWarning)``) do not take
    skdml's lock, so a section of ours overlapping one in another thread left its
    "error" filter in place for the rest of the process.
    """
    return bool(getattr(sys.flags, "context_aware_warnings", False)) or only_thread()


@contextlib.contextmanager
def quiet_warnings(*filters):
    """Ignore the warnings ``filters`` describe (``warnings.filterwarnings`` keyword dicts)
    in the block: scikit-learn's and torch's own messages that skdml says better, or that do
    not apply.

    Without context-aware warnings, ``warnings.catch_warnings`` swaps process-wide state
    and puts back what it found on exit, so two sections that overlap in two threads
    restore each other's filters: after two SDML fits in two threads, every later warning
    of the process was swallowed, or a ``ComplexWarning`` filter of scikit-learn's was
    left as an error. So the filters are swapped only where that cannot happen (one
    thread, or context-aware warnings), under one lock; with other threads running the
    block runs as it is and the warnings pass (each is still true, if less well said).

    Examples
    --------
    >>> import warnings
    >>> with quiet_warnings({"message": "noise", "category": UserWarning}):
    ...     warnings.warn("noise")          # not shown
    """
    if not _may_swap_filters():
        yield
        return
    with _FILTERS_LOCK, warnings.catch_warnings():
        for spec in filters:
            warnings.filterwarnings("ignore", **spec)
        yield


def validate_fitted_data(estimator, X, **kwargs):
    """scikit-learn's ``validate_data(estimator, X, reset=False, **kwargs)``, its warning
    about feature names attributed to the user's line.

    scikit-learn warns "X does not have valid feature names, but ... was fitted with
    feature names" (and the converse) at its own ``validation.py``. Where that warning
    is due (names at fit and none now, or the converse), the check runs in a recording
    section of the warning lock and what it warned is warned again with
    :func:`warn_user`; otherwise, or with other threads running (see
    :func:`quiet_warnings`), it runs as it is.
    """
    from sklearn.utils.validation import _get_feature_names, validate_data

    fitted = getattr(estimator, "feature_names_in_", None) is not None
    try:
        given = _get_feature_names(X) is not None
    except TypeError:  # column names of mixed types: validate_data says so itself
        given = fitted
    if fitted == given or not _may_swap_filters():
        return validate_data(estimator, X, reset=False, **kwargs)
    with _FILTERS_LOCK, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        X = validate_data(estimator, X, reset=False, **kwargs)
    for found in caught:
        warn_user(str(found.message), found.category)
    return X
