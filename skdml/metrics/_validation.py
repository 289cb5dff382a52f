"""Input checks shared by the neighbour engine and the scores.

Type and range checks of the public arguments are declared on each public function
with :func:`sklearn.utils._param_validation.validate_params`; the checks here go
beyond them: array shapes and contents, label kinds, ``k`` against the number of
candidates.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch
from sklearn.utils import check_array
from sklearn.utils.multiclass import type_of_target

from .._utils import check_label_input, check_orderable_labels, plain_labels

__all__ = ["as_host_array", "as_host_labels", "check_embeddings", "check_labels", "check_k",
           "check_pair", "encode_labels", "label_kind", "prepare_retrieval"]


def as_host_array(X):
    """A torch tensor as a host numpy array (detached; float32 or float64); else ``X``."""
    if isinstance(X, torch.Tensor):
        X = X.detach()
        if X.dtype not in (torch.float32, torch.float64):
            X = X.to(torch.float64)
        return X.cpu().numpy()
    return X


def as_host_labels(y):
    """A torch tensor of labels as a host numpy array of its own dtype; else ``y``.

    Labels are ids, not embeddings: int64 keys above 2**53 turned float64 (as
    :func:`as_host_array` makes embeddings) became one class. Only 16-bit floats,
    which numpy cannot hold (bfloat16), are widened to float32.
    """
    if isinstance(y, torch.Tensor):
        y = y.detach()
        if y.dtype in (torch.float16, torch.bfloat16):
            y = y.to(torch.float32)
        return y.cpu().numpy()
    return y


def check_embeddings(X, name):
    """2-D, finite, non-empty float array (float32 kept, anything else -> float64).

    "Anything else" includes float64 in a non-native byte order (``'>f8'``) and
    integers: both become native float64, never float32.
    """
    return check_array(
        as_host_array(X),
        dtype=[np.float64, np.float32],  # first: the type of anything not in the list
        ensure_all_finite=True,
        ensure_2d=True,
        allow_nd=False,
        ensure_min_samples=1,
        ensure_min_features=1,
        input_name=name,
    )


def check_labels(y, n_samples, name, x_name):
    """1-D discrete labels with one label per sample."""
    y = np.asarray(check_label_input(as_host_labels(y), name))  # a column: flattened
    if y.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of labels, got shape {y.shape}.")
    if y.shape[0] != n_samples:
        raise ValueError(
            f"{x_name} and {name} have inconsistent lengths: {n_samples} samples "
            f"but {y.shape[0]} labels."
        )
    y = check_orderable_labels(y, name)
    try:
        kind = type_of_target(y, input_name=name)
    except ValueError as exc:
        raise ValueError(f"{name} must hold discrete class labels: {exc}") from exc
    if kind not in ("binary", "multiclass"):
        raise ValueError(
            f"{name} must hold discrete class labels (integers or strings), got a target "
            f"of type {kind!r}."
        )
    return y


def check_k(k, n_candidates, what):
    """Normalise ``k`` to a list of positive ints, each at most ``n_candidates``.

    Returns ``(ks, single)``; ``single`` tells whether ``k`` was one int.
    """
    single = isinstance(k, numbers.Integral) and not isinstance(k, bool)
    ks = [k] if single else k
    try:
        ks = list(ks)
    except TypeError:
        raise ValueError(f"k must be a positive int or a list of them, got {k!r}.") from None
    if not ks:
        raise ValueError("k must be a positive int or a non-empty list of them, got [].")
    for value in ks:
        if (not isinstance(value, numbers.Integral)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"k must be a positive int or a list of them, got {value!r}.")
        if value > n_candidates:
            fix = f"Use k <= {n_candidates}." if n_candidates else \
                "A query needs at least one candidate: more samples are needed."
            raise ValueError(
                f"k={value} is too large: each query has only {n_candidates} candidate "
                f"neighbours ({what}). {fix}"
            )
    return [int(v) for v in ks], single


def label_kind(y):
    """``"numbers"``, ``"strings"``, or ``None`` (an object array: either, entry by entry).

    Two label arrays of different kinds must not be concatenated: numpy would turn
    the numbers into strings, and ``1`` and ``"1"`` into one label.

    Examples
    --------
    >>> label_kind(np.array([1, 2])), label_kind(np.array(["a"]))
    ('numbers', 'strings')
    >>> label_kind(np.array([1, "a"], dtype=object)) is None
    True
    """
    if y.dtype.kind == "O":
        return None
    return "numbers" if y.dtype.kind in "biuf" else "strings"


def encode_labels(y, y_ref):
    """Encode query and reference labels jointly to ``0..C-1`` (sorted label order)."""
    kinds = {label_kind(a) for a in (y, y_ref)} - {None}
    if len(kinds) == 2:  # concatenated, 1 and "1" would become one label
        raise ValueError("y and y_ref mix label types: one holds numbers, the other strings; "
                         "use one type for both.")
    joined = np.concatenate([y, y_ref])
    if not _joins_exactly(y, y_ref, joined.dtype):
        # e.g. int64 with uint64, or int64 above 2**53 with floats: numpy joins them as
        # float64, where 2**62 and 2**62 + 1 are one label. Python's numbers compare exactly
        joined = np.array(y.tolist() + y_ref.tolist(), dtype=object)
    try:
        codes, inverse = np.unique(joined, return_inverse=True)
    except TypeError as exc:
        raise ValueError(f"y and y_ref hold labels that cannot be compared: {exc}") from exc
    return codes, inverse[: y.shape[0]], inverse[y.shape[0]:]


def _joins_exactly(y, y_ref, dtype):
    """Whether both label arrays convert to ``dtype`` (their join's) and back unchanged.

    Then the conversion is one-to-one on their labels, so joining them merges no two
    labels. Only numbers of different dtypes are checked (strings and objects join as they
    are).

    Examples
    --------
    >>> big = np.array([2**62, 2**62 + 1])
    >>> _joins_exactly(big, big.astype(np.uint64), np.result_type(big, big.astype(np.uint64)))
    False
    >>> _joins_exactly(np.array([1, 2]), np.array([1.0, 2.5]), np.dtype(np.float64))
    True
    """
    for labels in (y, y_ref):
        if labels.dtype == dtype or labels.dtype.kind not in "biuf":
            continue
        # a float beyond the integer range: checked below (numpy's cast warning is a floating
        # point error, silenced by errstate; no catch_warnings, which is not thread-safe)
        with np.errstate(all="ignore"):
            back = labels.astype(dtype).astype(labels.dtype)
        if not np.array_equal(back, labels):
            return False
    return True


def check_pair(X, X_ref, *, x_name="X", ref_name="X_ref"):
    """Validate a query set and an optional reference set of the same width."""
    X = check_embeddings(X, x_name)
    if X_ref is None:
        return X, None
    R = check_embeddings(X_ref, ref_name)
    if R.shape[1] != X.shape[1]:
        raise ValueError(
            f"{x_name} has {X.shape[1]} features but {ref_name} has {R.shape[1]}: queries "
            "and references must live in the same embedding space."
        )
    return X, R


def prepare_retrieval(X, y, X_ref, y_ref):
    """Validate the query (and optional reference) set; encode the labels to 0..C-1.

    Returns ``X, yq, R, yr, exclude_self, n_candidates, counts`` where ``counts``
    is the number of references per encoded label.
    """
    if y is None:
        raise ValueError("y is required: the scores compare labels of neighbours.")
    if (X_ref is None) != (y_ref is None):
        raise ValueError("X_ref and y_ref must be given together (or neither).")
    X, R = check_pair(X, X_ref)
    y = check_labels(y, X.shape[0], "y", "X")
    if R is None:
        if X.shape[0] < 2:
            raise ValueError(
                f"X has {X.shape[0]} sample: retrieval needs at least 2 (each query is "
                "searched among the other samples)."
            )
        codes, yq = np.unique(y, return_inverse=True)
        if codes.size < 2:
            raise ValueError(
                f"y has a single class ({plain_labels(codes[:1])[0]!r}): retrieval scores need "
                "at least 2 classes to be meaningful."
            )
        return X, yq, X, yq, True, X.shape[0] - 1, np.bincount(yq, minlength=codes.size)
    yr = check_labels(y_ref, R.shape[0], "y_ref", "X_ref")
    codes, yq, yr = encode_labels(y, yr)
    if np.unique(yr).size < 2:
        raise ValueError(
            "y_ref has a single class: retrieval scores need at least 2 classes among "
            "the references to be meaningful."
        )
    return X, yq, R, yr, False, R.shape[0], np.bincount(yr, minlength=codes.size)
