"""Evenly spread subsamples, for every estimate read on a subsample."""

import numpy as np

__all__ = ["evenly_spaced"]


def evenly_spaced(indices, k):
    """At most ``k`` of ``indices``, spread evenly from the first to the last.

    The fixed estimates read on a subsample (standardisation statistics, principal
    axes, the classes' separation) see every part of the data, whatever their order:
    ``indices[::n // k][:k]`` read the first ``k`` rows whenever ``k < n < 2k`` (the
    first classes only, for data sorted by class).

    Examples
    --------
    >>> evenly_spaced(np.arange(10), 4)
    array([0, 3, 6, 9])
    >>> evenly_spaced(np.arange(3), 4)
    array([0, 1, 2])
    """
    indices = np.asarray(indices)
    if len(indices) <= k:
        return indices
    return indices[np.linspace(0, len(indices) - 1, k).round().astype(np.int64)]
