"""Weak supervision from labels: similar/dissimilar pairs, kNN triplets and chunks.

:class:`Constraints` turns (partially) labelled samples into the tuples the
weakly-supervised learners of :mod:`skdml.linear` fit on. Its methods return
*indices* into the samples: use them with a learner's ``preprocessor=X``, or
gather the features with ``X[indices]``.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.neighbors import NearestNeighbors
from sklearn.utils import check_array, check_random_state, column_or_1d

from ._utils import (flatten_label_column, is_missing_label, keep_label_types, plain_labels,
                     warn_user)

__all__ = ["Constraints"]

#: Rounds of rejection sampling :meth:`Constraints.positive_negative_pairs` draws at most.
MAX_ROUNDS = 10
#: When those rounds fall short, the missing pairs are drawn from a list of every pair of the
#: kind, if there are at most this many.
MAX_ENUMERATED_PAIRS = 20_000_000


def _all_pair_codes(classes, counts, same):
    """Codes ``a * n + b`` of every ordered pair ``a != b`` of the same (or different) class."""
    n = len(classes)
    order = np.argsort(classes, kind="stable")
    bounds = np.r_[0, np.cumsum(counts)]
    codes = []
    for c in range(len(counts)):
        members = order[bounds[c]:bounds[c + 1]]
        partners = members if same else np.r_[order[:bounds[c]], order[bounds[c + 1]:]]
        grid = members[:, None] * n + partners[None, :]
        if same:
            grid = grid[~np.eye(len(members), dtype=bool)]
        codes.append(grid.ravel())
    return np.sort(np.concatenate(codes)) if codes else np.empty(0, dtype=np.int64)


def _positive_int(value, name):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or value < 1:
        raise ValueError(f"{name} must be a positive integer; got {value!r}.")
    return int(value)


def _is_nan(values):
    """Which entries are missing: a float NaN, or in an object array None, NaN or pandas NA."""
    if values.dtype.kind in "fc":
        return np.isnan(values)
    if values.dtype.kind != "O":
        return np.zeros(values.shape, dtype=bool)
    return np.array([is_missing_label(v) for v in values.tolist()], dtype=bool)


class Constraints:
    """Build pairs, triplets and chunks from labelled samples.

    Parameters
    ----------
    partial_labels : array-like of shape (n_samples,)
        The class of each sample; samples labelled ``unknown_label`` belong
        to no class (they are never drawn).
    unknown_label : object, default=-1
        The label of unlabelled samples; ``None``: every sample is labelled;
        ``np.nan``: NaN marks them. A NaN label is refused otherwise. Unlike
        metric-learn, which takes *every* negative label for unknown, only
        this one label is unknown: with ``-1``, a label ``-2`` is a class.

    Attributes
    ----------
    partial_labels : ndarray of shape (n_samples,)
        The labels, as given.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.constraints import Constraints
    >>> labels = np.array([0, 0, 0, 1, 1, -1])
    >>> pairs, y = Constraints(labels).labeled_pairs(4, random_state=0)
    >>> pairs.shape, sorted(set(y.tolist()))
    ((8, 2), [-1, 1])
    >>> bool(np.all((labels[pairs[:, 0]] == labels[pairs[:, 1]]) == (y == 1)))
    True
    >>> Constraints(labels).chunks(n_chunks=2, chunk_size=2, random_state=0).tolist().count(-1)
    2
    """

    def __init__(self, partial_labels, unknown_label=-1):
        labels = np.asarray(flatten_label_column(keep_label_types(partial_labels),
                                                 "partial_labels"))
        if labels.ndim != 1:  # scikit-learn's column_or_1d would name it "y"
            raise ValueError("partial_labels should be a 1d array, got an array of shape "
                             f"{labels.shape} instead.")
        labels = column_or_1d(labels, input_name="partial_labels")
        self.partial_labels = labels
        self.unknown_label = unknown_label
        missing = _is_nan(labels)
        if isinstance(unknown_label, numbers.Real) and unknown_label != unknown_label:
            known = ~missing  # unknown_label=np.nan: a missing label marks the unknown samples
        else:
            if np.any(missing):  # before comparing: pandas NA cannot be compared
                advice = ("unknown_label=None says every sample is labelled: pass "
                          "unknown_label=np.nan to mark these samples unknown" if
                          unknown_label is None else "give unlabelled samples the "
                          f"unknown_label ({unknown_label!r}), or pass unknown_label=np.nan")
                raise ValueError("partial_labels contains NaN or a missing value (None, pandas "
                                 f"NA); {advice}.")
            known = np.ones(len(labels), dtype=bool) if unknown_label is None else \
                labels != unknown_label
        self._known = np.flatnonzero(known)
        try:
            _, self._classes = np.unique(labels[self._known], return_inverse=True)
        except TypeError as exc:
            raise ValueError("partial_labels mixes label types that cannot be sorted "
                             f"together ({exc}).") from exc

    # ----------------------------------------------------------------- pairs
    def positive_negative_pairs(self, n_constraints, same_length=False, random_state=None):
        """Draw similar pairs (same label) and dissimilar pairs (different labels).

        Each pair ``(a, b)`` draws ``a`` uniformly among the labelled samples
        that have a partner, then ``b`` uniformly among its partners; pairs are
        distinct (``(a, b)`` and ``(b, a)`` count as two) and never ``(a, a)``.
        When fewer distinct pairs exist, all of them are returned, with a
        warning.

        Parameters
        ----------
        n_constraints : int
            Pairs of each kind.
        same_length : bool, default=False
            Cut the longer list so that both have the same length.
        random_state : int, RandomState instance or None, default=None

        Returns
        -------
        a, b : ndarray of shape (n_positive,)
            Indices of the two samples of each similar pair.
        c, d : ndarray of shape (n_negative,)
            Indices of the two samples of each dissimilar pair.
        """
        return self._positive_negative_pairs(n_constraints, same_length, random_state)

    def _positive_negative_pairs(self, n_constraints, same_length, random_state, warn=True):
        """:meth:`positive_negative_pairs`; ``warn=False``: no warning when fewer exist (a
        learner's default count, "at most the pairs that exist", is no request of the user's)."""
        n_constraints = _positive_int(n_constraints, "n_constraints")
        rng = check_random_state(random_state)
        a, b = self._pairs(n_constraints, True, rng, warn)
        c, d = self._pairs(n_constraints, False, rng, warn)
        if same_length and len(a) != len(c):
            n = min(len(a), len(c))
            a, b, c, d = a[:n], b[:n], c[:n], d[:n]
        return a, b, c, d

    def labeled_pairs(self, n_constraints, same_length=False, random_state=None):
        """:meth:`positive_negative_pairs` as one array of index pairs and their labels.

        Parameters
        ----------
        n_constraints : int
            Pairs of each kind.
        same_length : bool, default=False
            As many dissimilar pairs as similar ones.
        random_state : int, RandomState instance or None, default=None

        Returns
        -------
        pairs : ndarray of shape (n_pairs, 2)
            Sample indices; ``X[pairs]`` has shape (n_pairs, 2, n_features).
        y : ndarray of shape (n_pairs,)
            +1 for the similar pairs (first), -1 for the dissimilar ones.
        """
        return self._labeled_pairs(n_constraints, same_length, random_state)

    def _labeled_pairs(self, n_constraints, same_length, random_state, warn=True):
        """:meth:`labeled_pairs`, ``warn`` as in :meth:`_positive_negative_pairs`."""
        a, b, c, d = self._positive_negative_pairs(n_constraints, same_length, random_state,
                                                   warn)
        pairs = np.vstack([np.column_stack([a, b]), np.column_stack([c, d])])
        return pairs, np.r_[np.ones(len(a), dtype=np.int64), -np.ones(len(c), dtype=np.int64)]

    def _pairs(self, n_constraints, same, rng, warn=True):
        classes, n = self._classes, len(self._classes)
        if n == 0:
            raise ValueError("No labelled sample: every label is unknown_label.")
        order = np.argsort(classes, kind="stable")
        counts = np.bincount(classes)
        starts = np.r_[0, np.cumsum(counts)[:-1]]
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n) - starts[classes[order]]  # position inside the class
        partners = counts[classes] - 1 if same else n - counts[classes]
        eligible = np.flatnonzero(partners > 0)
        kind = "similar" if same else "dissimilar"
        found = np.empty(0, dtype=np.int64)
        # ordered pairs of the kind: no round draws more than exist (a request of 10**12
        # pairs among a few costs what the few cost)
        population = int(np.sum(partners[eligible]))
        for _ in range(MAX_ROUNDS if len(eligible) else 0):
            need = min(n_constraints, population) - len(found)
            if need <= 0:
                break
            a = eligible[rng.randint(len(eligible), size=need)]
            r = np.floor(rng.random_sample(need) * partners[a]).astype(np.int64)
            if same:  # skip a itself inside its class
                b = order[starts[classes[a]] + r + (r >= rank[a])]
            else:  # skip a's class block in the class-sorted order
                b = order[r + np.where(r >= starts[classes[a]], counts[classes[a]], 0)]
            codes = np.r_[found, a * n + b]
            _, first = np.unique(codes, return_index=True)
            found = codes[np.sort(first)]
        found = found[:n_constraints]
        if len(found) < n_constraints:
            # near saturation, rejection sampling misses the last free pairs: draw those from
            # the list of every pair of the kind (the rounds' draws kept first, as before)
            if population <= MAX_ENUMERATED_PAIRS:
                free = np.setdiff1d(_all_pair_codes(classes, counts, same), found,
                                    assume_unique=True)
                found = np.r_[found, rng.permutation(free)[:n_constraints - len(found)]]
            if len(found) < n_constraints and warn:
                exist = "exist" if population <= MAX_ENUMERATED_PAIRS else "could be drawn"
                warn_user(f"Only {len(found)} distinct {kind} pairs {exist} (requested "
                          f"{n_constraints}).")
        return self._known[found // n], self._known[found % n]

    # -------------------------------------------------------------- triplets
    def generate_knntriplets(self, X, k_genuine, k_impostor):
        """Triplets ``(a, p, n)``: ``p`` among the ``k_genuine`` nearest same-class samples
        of ``a`` and ``n`` among its ``k_impostor`` nearest samples of other classes.

        Every labelled sample is an anchor, with every combination of its
        genuine and impostor neighbours (Euclidean, in ``X``). A class with too
        few samples gets fewer neighbours, with a warning.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        k_genuine : int
        k_impostor : int

        Returns
        -------
        triplets : ndarray of shape (n_triplets, 3)
            Sample indices.
        """
        return self._knntriplets(X, k_genuine, k_impostor)

    def _knntriplets(self, X, k_genuine, k_impostor, warn=True):
        """:meth:`generate_knntriplets`; ``warn``: whether a class that cannot give
        ``(k_genuine, k_impostor)`` warns, one flag for both or one each (a learner's
        defaults, which it documents, are no request of the user's)."""
        warn_genuine, warn_impostor = (warn, warn) if isinstance(warn, bool) else warn
        X = check_array(X, dtype=np.float64)
        if len(X) != len(self.partial_labels):
            raise ValueError(f"X has {len(X)} samples but the labels {len(self.partial_labels)}.")
        k_genuine = _positive_int(k_genuine, "k_genuine")
        k_impostor = _positive_int(k_impostor, "k_impostor")
        known, classes = self._known, self._classes
        out = []
        for c in range(classes.max(initial=-1) + 1):
            members, others = known[classes == c], known[classes != c]
            kg, ki = min(k_genuine, len(members) - 1), min(k_impostor, len(others))
            if (kg != k_genuine and warn_genuine) or (ki != k_impostor and warn_impostor):
                label = plain_labels(self.partial_labels[members[:1]])[0]
                warn_user(f"Class {label!r} gives {kg} genuine and "
                          f"{ki} impostor neighbours (asked {k_genuine} and {k_impostor}).")
            if kg < 1 or ki < 1:
                continue
            genuine = members[NearestNeighbors(n_neighbors=kg).fit(X[members]).kneighbors(
                return_distance=False)]
            impostor = others[NearestNeighbors(n_neighbors=ki).fit(X[others]).kneighbors(
                X[members], return_distance=False)]
            a = np.repeat(members, kg * ki)
            p = np.repeat(genuine.reshape(-1), ki)
            q = np.tile(impostor, (1, kg)).reshape(-1)
            out.append(np.column_stack([a, p, q]))
        if not out:
            raise ValueError("No triplet can be formed: every class needs 2 labelled samples "
                             "and another class.")
        return np.vstack(out)

    # ---------------------------------------------------------------- chunks
    def chunks(self, n_chunks=100, chunk_size=2, random_state=None):
        """Disjoint groups of ``chunk_size`` samples of one class each (RCA's chunklets).

        The drawing is metric-learn 0.7.0's, draw for draw, so that the same
        ``random_state`` gives the same chunks: each chunk picks a class with
        ``randint(0, n_left - 1)`` among the ``n_left`` classes still listed
        (in label order), then ``chunk_size`` of its unchunked samples with
        ``choice(..., replace=False)``; a class with fewer than ``chunk_size``
        samples left is struck off the list when picked. As in metric-learn,
        the class listed last is picked only once it is the only one left,
        so with fewer chunks than the classes allow it gets none.

        Parameters
        ----------
        n_chunks : int, default=100
        chunk_size : int, default=2
        random_state : int, RandomState instance or None, default=None

        Returns
        -------
        chunks : ndarray of shape (n_samples,)
            The chunk of each sample, -1 for samples in none.
        """
        n_chunks = _positive_int(n_chunks, "n_chunks")
        chunk_size = _positive_int(chunk_size, "chunk_size")
        return draw_chunks(self._classes, self._known, len(self.partial_labels), n_chunks,
                           chunk_size, check_random_state(random_state))


def draw_chunks(classes, samples, n_samples, n_chunks, chunk_size, rng):
    """:meth:`Constraints.chunks` on ``samples`` (indices) of class codes ``classes`` (0..K-1).

    Returns the chunk of each of the ``n_samples`` samples (-1: none); raises
    when fewer than ``n_chunks`` chunks can be formed.
    """
    order = np.argsort(classes, kind="stable")
    bounds = np.cumsum(np.bincount(classes))[:-1] if len(classes) else []
    # Python sets of the sample indices: their iteration order is the order
    # metric-learn's ``choice(list(set))`` draws from.
    left = [set(members.tolist()) for members in np.split(np.asarray(samples)[order], bounds)]
    possible = sum(len(members) // chunk_size for members in left)
    if possible < n_chunks:
        raise ValueError(f"Not enough samples for {n_chunks} chunks of {chunk_size} samples "
                         f"of one class each: at most {possible} can be formed.")
    drawn = []
    while len(drawn) < n_chunks:
        c = 0 if len(left) == 1 else rng.randint(0, high=len(left) - 1)
        if len(left[c]) < chunk_size:
            del left[c]
            continue
        pool = list(left[c])  # choice(pool, size, replace=False), draw for draw:
        members = [pool[i] for i in rng.permutation(len(pool))[:chunk_size].tolist()]
        left[c].difference_update(members)
        drawn.append(members)
    chunks = np.full(n_samples, -1, dtype=np.int64)
    chunks[np.ravel(drawn)] = np.repeat(np.arange(n_chunks), chunk_size)
    return chunks
