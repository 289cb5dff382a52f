"""Class labels as the user gave them: numbers kept apart from strings, missing labels refused.

numpy merges ``[0, "0"]`` into the one string ``"0"``, sklearn's checks fail
on pandas ``NA`` with ``boolean value of NA is ambiguous``, and an object
column of integers is an ``'unknown'`` target to ``type_of_target``: every
entry point that reads labels (the learners, the scorers, the splitters, the
index, :class:`~skdml.Constraints`) goes through these helpers first.
"""

from __future__ import annotations

import contextlib
import numbers

import numpy as np
import torch
from scipy.sparse import issparse
from sklearn.exceptions import DataConversionWarning

from ._warnings import warn_user

__all__ = ["check_label_input", "check_orderable_labels", "flatten_label_column",
           "integer_ids", "integer_objects", "is_missing_label", "keep_label_types",
           "plain_labels"]


def plain_labels(labels):
    """Labels as messages show them: a list of plain Python values (``7``, not ``np.int64(7)``).

    An object array's elements come back from ``tolist`` as they are, numpy scalars too.
    """
    return [value.item() if isinstance(value, np.generic) else value
            for value in np.asarray(labels).ravel().tolist()]


def is_missing_label(label):
    """Whether one label is None, NaN or a missing value (pandas ``NA``: comparing it fails)."""
    if label is None:
        return True
    try:
        return bool(label != label)
    except TypeError:
        return True


def integer_ids(values):
    """Python integers as int64, else uint64 (ids above 2**63), exactly; refused beyond."""
    low, high = min(values), max(values)
    if -2**63 <= low and high < 2**63:
        return np.array(values, dtype=np.int64)
    if 0 <= low and high < 2**64:
        return np.array(values, dtype=np.uint64)
    raise ValueError(f"Integer labels from {low} to {high} fit no 64-bit integer type, so "
                     "they cannot be kept exactly; pass them as strings.")


def _is_integer(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def integer_objects(array):
    """An object array of integers only (pandas' nullable ``Int64``) as int64; else as it is
    (beyond int64 too: out of any index's range)."""
    if array.dtype == object and array.size and all(_is_integer(v) for v in array.flat):
        with contextlib.suppress(OverflowError):
            return array.astype(np.int64)
    return array


def keep_label_types(y):
    """A list or tuple of labels as an array, numbers kept apart from strings.

    ``np.asarray([0, "0"])`` makes both the string ``"0"``: one class where there
    are two. Mixed, they become an object array, which :func:`check_orderable_labels`
    refuses. Anything but a list or tuple is returned unchanged.

    Examples
    --------
    >>> keep_label_types([0, 0, "0"])
    array([0, 0, '0'], dtype=object)
    >>> keep_label_types(["a", "b"])
    array(['a', 'b'], dtype='<U1')
    """
    if not isinstance(y, (list, tuple)):
        return y
    values = np.asarray(y)
    if values.dtype.kind in "US":
        # the leaves, in the list's own shape: a column [["a"], ["b"]] stays a column of
        # strings (flattened by the caller's check), [[0], ["0"]] an object column
        leaves = np.empty(values.shape, dtype=object)
        leaves[...] = y if values.ndim == 1 else np.array(y, dtype=object)
        if not all(isinstance(v, (str, bytes)) for v in leaves.ravel()):
            values = leaves
    return values


def flatten_label_column(y, name="y"):
    """A column of labels, shape ``(n, 1)``, flattened with scikit-learn's
    ``DataConversionWarning`` at the user's line; anything else unchanged.

    ``name``: the argument as the user passed it, in the warning.

    scikit-learn's own ``column_or_1d`` warns with a fixed ``stacklevel``, which
    named a file inside scikit-learn or skdml, not the line that passed the column.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     flatten_label_column(np.array([[1], [2]]))
    array([1, 2])
    >>> caught[0].category.__name__
    'DataConversionWarning'
    """
    if issparse(y):
        raise ValueError(f"Labels must be a dense 1-d array; got a sparse {type(y).__name__}.")
    shape = getattr(y, "shape", None)
    if shape is not None and len(shape) == 2 and shape[1] == 1:
        warn_user(f"A column-vector {name} was passed when a 1d array was expected. Please "
                  f"change the shape of {name} to (n_samples, ), for example using ravel().",
                  DataConversionWarning)
        return y.reshape(-1) if isinstance(y, torch.Tensor) else np.asarray(y).ravel()
    return y


def check_label_input(y, name="y", column=True):
    """Raw class labels, before scikit-learn's validation reads them.

    Lists keep their types (:func:`keep_label_types`); labels that are None,
    NaN or pandas ``NA`` are refused here, with their position (scikit-learn's
    check fails on ``NA`` with ``boolean value of NA is ambiguous``). Anything
    else is returned unchanged (a DataFrame keeps its type for scikit-learn), but for a
    column of labels, flattened (:func:`flatten_label_column`) when ``column`` is true, as
    for a ``y`` argument (scikit-learn's convention); the labels a ``Dataset`` holds pass
    ``column=False``, and a column is left to the caller's shape check.

    Examples
    --------
    >>> check_label_input(np.array(["a", None], dtype=object))
    Traceback (most recent call last):
    ...
    ValueError: y contains a missing label (None, NaN or pandas NA) at position 1; every ...
    """
    y = keep_label_types(y)
    if column:
        y = flatten_label_column(y)
    if y is None or isinstance(y, torch.Tensor):
        return y  # no labels (the caller says y is required), or numbers on an accelerator
    values = np.asarray(y)
    if values.dtype == object:
        missing = next((i for i, v in enumerate(values.ravel().tolist())
                        if is_missing_label(v)), None)
        if missing is not None:
            raise ValueError(
                f"{name} contains a missing label (None, NaN or pandas NA) at position "
                f"{missing}; every sample needs a class label: drop the unlabelled samples "
                "or give them a label of their own.")
    return y


def check_orderable_labels(y, name="y"):
    """Labels as an array: integers in an object array made integers; mixed types refused.

    ``np.unique`` (behind scikit-learn's ``type_of_target`` and every label
    encoding) sorts the labels: numbers beside strings raised numpy's
    ``'<' not supported between instances of 'int' and 'str'``. An object array
    of integers (a pandas ``object`` column) is scikit-learn's ``'unknown'``
    target: it becomes int64 (uint64 above 2**63), exactly. Other arrays pass
    unchanged.

    Examples
    --------
    >>> check_orderable_labels(np.array(["a", "b"]))
    array(['a', 'b'], dtype='<U1')
    >>> check_orderable_labels(np.array([2, 1], dtype=object))
    array([2, 1])
    >>> check_orderable_labels(np.array(["a", 1], dtype=object))
    Traceback (most recent call last):
    ...
    ValueError: y mixes label types ['int', 'str'] that cannot be ordered ...
    """
    y = np.asarray(y)
    if y.dtype.kind == "O":
        flat = y.ravel().tolist()
        if flat and all(map(_is_integer, flat)):
            return integer_ids(flat).reshape(y.shape)
        try:
            np.unique(y.ravel())
        except TypeError as exc:
            kinds = sorted({type(v).__name__ for v in flat})
            raise ValueError(f"{name} mixes label types {kinds} that cannot be ordered "
                             f"({exc}); use one type (all strings, or all numbers).") from exc
    return y
