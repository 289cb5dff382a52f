"""Warnings that point at the user's line, not at skdml's (or scikit-learn's) internals."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import warnings

__all__ = ["quiet_warnings", "validate_fitted_data", "warn_user"]

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


#: Guards the insertion and removal of the quiet sections' filters (below).
_FILTERS_LOCK = threading.RLock()


def _filters_mutated():
    """Tell the warnings machinery that ``warnings.filters`` changed in place (CPython's
    private hook, as ``warnings.filterwarnings`` calls it); None where it has another name."""
    return getattr(warnings, "_filters_mutated", None)


class _InSection:
    """A filter's message pattern that matches only in a thread inside one of its sections.

    The warnings machinery calls ``match`` on any message pattern that is not a string;
    an "ignore" decision is never cached, so the answer may depend on the thread.
    """

    #: What a copy of the filter list rebuilds the filter from (scikit-learn's ``Parallel``
    #: passes every filter's ``message.pattern`` to ``warnings.filterwarnings``, which wants
    #: a string): a pattern that matches nothing, so the copy quiets nothing.
    pattern = "(?!)"

    def __init__(self, message):
        self.regex = re.compile(message, re.I)
        self.local = threading.local()  # this thread's sections of the rule
        self.sections = 0  # every thread's, under _FILTERS_LOCK

    def match(self, text):
        return getattr(self.local, "depth", 0) > 0 and self.regex.match(text) is not None

    def __repr__(self):
        return f"<skdml quiet section: {self.regex.pattern!r}>"

    def __reduce__(self):
        # a pickled or deep-copied filter list (scikit-learn's Parallel sends the list to
        # loky's workers) holds a pattern that matches nothing (a thread-local cannot be
        # pickled: "Could not pickle the task to send it to the workers")
        return re.compile, (self.pattern,)


#: One filter per spec, made once (``(message, category, module)`` -> filter item).
_SECTION_FILTERS = {}


def _section_filter(spec):
    key = (spec.get("message", ""), spec.get("category", Warning), spec.get("module", ""))
    if key not in _SECTION_FILTERS:
        message, category, module = key
        _SECTION_FILTERS[key] = ("ignore", _InSection(message), category,
                                 re.compile(module) if module else None, 0)
    return _SECTION_FILTERS[key]


def _drop(items, listed):
    """Remove ``items`` from the filter list ``listed``, by identity (a user's equal filter
    is another rule, and stays)."""
    keep = [f for f in listed if not any(f is item for item in items)]
    if len(keep) != len(listed):
        listed[:] = keep


@contextlib.contextmanager
def quiet_warnings(*filters):
    """Ignore the warnings ``filters`` describe (``warnings.filterwarnings`` keyword dicts)
    in the block, in this thread: scikit-learn's and torch's own messages that skdml says
    better, or that do not apply.

    ``warnings.catch_warnings`` saves the process's filter list and puts it back on exit
    (without context-aware warnings), so two sections that overlap in two threads restore
    each other's: after two SDML fits in two threads, every later warning of the process
    was swallowed, or scikit-learn's ``ComplexWarning`` "error" filter (its
    ``check_array``) was left in place. So a section does not swap the list. Its filters
    are inserted at the front, one shared item per spec whose message pattern matches only
    in the threads inside a section of it (another thread's warnings pass, even skdml's
    own copy of a message it quiets), and are removed, by identity, when the last section
    using them ends. An item a concurrent ``catch_warnings`` copied and puts back later
    matches nothing outside a section. With context-aware warnings (Python 3.14's
    ``-X context_aware_warnings``), ``catch_warnings`` is used.

    Examples
    --------
    >>> import warnings
    >>> with quiet_warnings({"message": "noise", "category": UserWarning}):
    ...     warnings.warn("noise")          # not shown
    """
    mutated = _filters_mutated()
    if getattr(sys.flags, "context_aware_warnings", False) or mutated is None:
        with _FILTERS_LOCK, warnings.catch_warnings():
            for spec in filters:
                warnings.filterwarnings("ignore", **spec)
            yield
        return
    items = list(dict.fromkeys(_section_filter(spec) for spec in filters))
    with _FILTERS_LOCK:
        for item in items:
            local = item[1].local
            local.depth = getattr(local, "depth", 0) + 1
            item[1].sections += 1
            if not any(f is item for f in warnings.filters):
                warnings.filters.insert(0, item)
        mutated()
    try:
        yield
    finally:
        with _FILTERS_LOCK:
            done = []
            for item in items:
                item[1].local.depth -= 1
                item[1].sections -= 1
                if not item[1].sections:
                    done.append(item)
            if done:
                _drop(done, warnings.filters)
            mutated()


#: scikit-learn's warnings about feature names in ``validate_data(reset=False)``.
_FEATURE_NAME_MESSAGES = ("X does not have valid feature names", "X has feature names, but")


def validate_fitted_data(estimator, X, **kwargs):
    """scikit-learn's ``validate_data(estimator, X, reset=False, **kwargs)``, its warning
    about feature names attributed to the user's line.

    scikit-learn warns "X does not have valid feature names, but ... was fitted with
    feature names" (and the converse) at its own ``validation.py``. Where that warning
    is due (names at fit and none now, or the converse), skdml warns the same message
    with :func:`warn_user` and quiets scikit-learn's (:func:`quiet_warnings`).
    """
    from sklearn.utils.validation import _get_feature_names, validate_data

    fitted = getattr(estimator, "feature_names_in_", None) is not None
    try:
        given = _get_feature_names(X) is not None
    except TypeError:  # column names of mixed types: validate_data says so itself
        given = fitted
    if fitted == given:
        return validate_data(estimator, X, reset=False, **kwargs)
    name = type(estimator).__name__
    warn_user(f"X has feature names, but {name} was fitted without feature names" if given
              else f"X does not have valid feature names, but {name} was fitted with "
              "feature names")
    with quiet_warnings(*({"message": m, "category": UserWarning}
                          for m in _FEATURE_NAME_MESSAGES)):
        return validate_data(estimator, X, reset=False, **kwargs)
