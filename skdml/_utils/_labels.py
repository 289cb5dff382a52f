"""The one check of class labels that numpy cannot order (numbers beside strings)."""

from __future__ import annotations

import numpy as np

__all__ = ["check_orderable_labels"]


def check_orderable_labels(y, name="y"):
    """Refuse an object array of labels mixing types that cannot be sorted.

    ``np.unique`` (behind scikit-learn's ``type_of_target`` and every label
    encoding) sorts the labels: numbers beside strings raised numpy's
    ``'<' not supported between instances of 'int' and 'str'``. Other arrays
    pass unchanged.

    Examples
    --------
    >>> check_orderable_labels(np.array(["a", "b"]))
    array(['a', 'b'], dtype='<U1')
    >>> check_orderable_labels(np.array(["a", 1], dtype=object))
    Traceback (most recent call last):
    ...
    ValueError: y mixes label types ['int', 'str'] that cannot be ordered ...
    """
    y = np.asarray(y)
    if y.dtype.kind == "O":
        try:
            np.unique(y.ravel())
        except TypeError as exc:
            kinds = sorted({type(v).__name__ for v in y.ravel().tolist()})
            raise ValueError(f"{name} mixes label types {kinds} that cannot be ordered "
                             f"({exc}); use one type (all strings, or all numbers).") from exc
    return y
