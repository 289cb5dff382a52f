"""Clustering scores: NMI and pairwise F1 of a k-means clustering against the classes.

k-means runs on the robustly standardised embeddings (:func:`_standardise`). Up
to :data:`SKLEARN_SEEDING_MAX_CLUSTERS` clusters it is scikit-learn's ``KMeans``
as it is; with more clusters (retrieval data sets have thousands of classes)
the same greedy k-means++ seeding runs in :func:`_greedy_kmeans_pp`, then
scikit-learn's Lloyd iterations: scikit-learn's seeding of float32 data took 41
of the 43 s of ``clustering_scores`` on 60,000 rows with 3,000 classes.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import validate_params
from threadpoolctl import threadpool_limits

from .._utils import choose_n_threads, plain_labels, quiet_warnings, thread_limits, warn_user
from ._exact import centre_on_median
from ._validation import check_embeddings, check_labels
from .._utils._params import positive_int

__all__ = ["nmi_score", "clustering_f1_score", "clustering_scores"]

_CONSTRAINTS = {
    "X": ["array-like"],
    "y": ["array-like"],
    "random_state": ["random_state"],
    "n_init": [positive_int()],
}


class _Contingency:
    """The contingency table of two 0-based code arrays, by its non-zero cells only.

    At most ``n`` cells are non-zero, and the scores read only them and the row
    and column totals: a dense ``(n_classes, n_clusters)`` table grew with n**2
    where classes have a fixed size (5 images a class at 32,000 samples: 937 MB
    for 2 MB of input). ``cells`` are in row-major order, as ``np.nonzero`` of
    the dense table gives them, so the scores sum in the same order.
    """

    def __init__(self, classes, clusters):
        n_clusters = int(clusters.max()) + 1
        keys, self.cells = np.unique(classes.astype(np.int64) * n_clusters + clusters,
                                     return_counts=True)
        self.cell_rows, self.cell_cols = np.divmod(keys, n_clusters)
        self.rows = np.bincount(classes).astype(np.int64)  # class sizes
        self.cols = np.bincount(clusters).astype(np.int64)  # cluster sizes
        self.n = int(classes.size)

    def sum(self):
        return self.n


def _contingency(classes, clusters):
    """The contingency table (:class:`_Contingency`) of two 0-based code arrays."""
    return _Contingency(classes, clusters)


def _entropy(counts, n):
    p = counts[counts > 0] / n
    return float(-np.sum(p * np.log(p)))


def _nmi_from_table(table):
    """``2 I / (H(rows) + H(cols))`` from a contingency table."""
    n, rows, cols = table.n, table.rows, table.cols
    h_rows, h_cols = _entropy(rows, n), _entropy(cols, n)
    if h_rows + h_cols == 0.0:  # both partitions are trivial and identical
        return 1.0
    i, j = table.cell_rows, table.cell_cols
    nij = table.cells.astype(np.float64)
    mi = float(np.sum(nij / n * (np.log(nij) + np.log(n) - np.log(rows[i]) - np.log(cols[j]))))
    return float(np.clip(2.0 * max(mi, 0.0) / (h_rows + h_cols), 0.0, 1.0))


def _pair_f1_from_table(table):
    """Pairwise F1: precision/recall of 'same cluster' pairs against 'same class' pairs.

    ``TP = sum_ij C(n_ij, 2)``, ``P = TP / sum_j C(b_j, 2)`` (pairs in a cluster),
    ``R = TP / sum_i C(a_i, 2)`` (pairs in a class), ``F1 = 2 TP / (pairs in a
    cluster + pairs in a class)``. Exact in integer arithmetic.
    """
    def pairs(c):
        c = c.astype(np.int64)
        return int(np.sum(c * (c - 1) // 2))

    tp = pairs(table.cells)
    same_class, same_cluster = pairs(table.rows), pairs(table.cols)
    if same_class + same_cluster == 0:
        raise ValueError(
            "Pairwise F1 is undefined: no two samples share a class or a cluster."
        )
    return 2.0 * tp / (same_class + same_cluster)


def _standardise(X):
    """``(X - median) / spread`` in float64, rescaled by powers of two only; X's dtype back.

    The k-means partition is invariant to a translation of all points and to one
    positive scale factor (the objective is scaled by its square, the k-means++
    sampling probabilities and the relative tolerance are unchanged), so this
    changes nothing in exact arithmetic. In floating point it keeps k-means in a
    safe range: at scales like 1e-155 or 1e155 its squared distances would
    underflow or overflow. The spread is the mean absolute deviation from the
    coordinate-wise median (never 0 unless all points coincide, and at least
    ``max |X - median| / (n d)``, so no point can overflow afterwards).
    """
    Z = centre_on_median(X)  # a float64 copy
    spread = float(np.mean(np.abs(Z)))
    if spread == 0.0:
        raise ValueError(
            "All samples of X are identical: k-means cannot split them, so the "
            "clustering (and its NMI and F1) is undefined."
        )
    np.ldexp(Z, -math.frexp(spread)[1], out=Z)
    return Z.astype(X.dtype, copy=False)


def _cluster(X, y, random_state, n_init):
    X = check_embeddings(X, "X")
    if y is None:
        raise ValueError("y is required: the scores compare clusters with classes.")
    y = check_labels(y, X.shape[0], "y", "X")
    classes, codes = np.unique(y, return_inverse=True)
    if classes.size < 2:
        raise ValueError(
            f"y has a single class ({plain_labels(classes[:1])[0]!r}): clustering scores need "
            "at least 2 classes."
        )
    Z = _standardise(X)
    return _contingency(codes, np.unique(_kmeans(Z, classes.size, random_state, int(n_init)),
                                         return_inverse=True)[1])


#: Up to this many clusters, scikit-learn's ``KMeans`` as it is; beyond, the same greedy
#: k-means++ seeding by :func:`_greedy_kmeans_pp`, then scikit-learn's Lloyd iterations.
SKLEARN_SEEDING_MAX_CLUSTERS = 100


def _greedy_kmeans_pp(Z, k, rng):
    """Greedy k-means++ seeding, scikit-learn's algorithm, in one pass of torch per centre.

    Each centre is the best (lowest potential) of ``2 + floor(log k)`` rows drawn
    with probability proportional to their squared distance to the nearest centre
    so far (Arthur & Vassilvitskii 2007; scikit-learn's ``kmeans_plusplus``). Per
    centre: one ``(trials x d) @ (d x n)`` product fused with the norms, a minimum
    and a sum, in float32 on one thread (memory-bound steps: threaded BLAS made
    them 10x slower on a loaded machine); potentials and the sampling in float64.
    ``O(n k d log k)`` time, ``O(n log k)`` memory beyond ``Z``.
    """
    n = Z.shape[0]
    trials = 2 + int(np.log(k))
    Zt = torch.from_numpy(np.ascontiguousarray(Z, dtype=np.float32))
    sq = torch.einsum("ij,ij->i", Zt, Zt)
    centres = np.empty(k, dtype=np.int64)
    with thread_limits(1), torch.inference_mode():
        centres[0] = rng.randint(n)
        first = Zt[int(centres[0])]
        closest = torch.clamp(sq - 2.0 * (Zt @ first) + sq[int(centres[0])], min=0.0)
        potential = float(closest.sum(dtype=torch.float64))
        for j in range(1, k):
            cumulative = torch.cumsum(closest, 0, dtype=torch.float64).numpy()
            draws = rng.uniform(size=trials) * potential
            candidates = np.minimum(np.searchsorted(cumulative, draws), n - 1)
            cand = torch.from_numpy(candidates)
            d = torch.addmm(sq.unsqueeze(0), Zt[cand], Zt.T, beta=1.0, alpha=-2.0)
            d += sq[cand].unsqueeze(1)
            d.clamp_(min=0.0)
            torch.minimum(d, closest.unsqueeze(0), out=d)
            potentials = d.sum(dim=1, dtype=torch.float64)
            best = int(torch.argmin(potentials))
            centres[j], potential, closest = candidates[best], float(potentials[best]), d[best]
    return Z[centres]


def _kmeans(Z, n_clusters, random_state, n_init):
    """Cluster labels of the best of ``n_init`` k-means runs (lowest inertia)."""
    rng = check_random_state(random_state)
    # skdml's thread policy for scikit-learn's OpenMP loops too (one Lloyd iteration's work);
    # their threads may spin at barriers, so a busy machine's rule applies to them
    flops = 2.0 * Z.shape[0] * n_clusters * Z.shape[1]
    with thread_limits(flops_per_step=flops), \
            threadpool_limits(choose_n_threads(flops), user_api="openmp"), \
            quiet_warnings({"message": "Number of distinct clusters",
                            "category": ConvergenceWarning}):
        # scikit-learn's ConvergenceWarning for fewer distinct points than clusters: no
        # optimiser was cut short; said below, once, as what it is
        if n_clusters <= SKLEARN_SEEDING_MAX_CLUSTERS or n_clusters > Z.shape[0]:
            labels = KMeans(n_clusters=n_clusters, n_init=n_init,
                            random_state=rng).fit_predict(Z)
        else:
            best = None
            for _ in range(n_init):
                seeds = _greedy_kmeans_pp(Z, n_clusters, rng)
                run = KMeans(n_clusters=n_clusters, init=seeds, n_init=1,
                             random_state=rng).fit(Z)
                if best is None or run.inertia_ < best.inertia_:
                    best = run
            labels = best.labels_
    found = np.unique(labels).size
    if found < n_clusters:
        warn_user(f"k-means found {found} clusters for {n_clusters} classes: X has fewer "
                  "distinct points than classes, so some classes cannot get a cluster of "
                  "their own (the scores count that).")
    return labels


@validate_params(_CONSTRAINTS, prefer_skip_nested_validation=True)
def clustering_scores(X, y, *, random_state=None, n_init=1):
    """NMI and pairwise F1 of a k-means clustering of ``X``, from one k-means run.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings to cluster.
    y : array-like of shape (n_samples,)
        Class labels (integers or strings).
    random_state : int, RandomState instance or None, default=None
        Seed of k-means (pass an int for reproducible scores).
    n_init : int, default=1
        Number of k-means++ initialisations (the best inertia is kept).

    Returns
    -------
    scores : dict
        ``{"nmi": float, "f1": float}``; see :func:`nmi_score` and
        :func:`clustering_f1_score`.

    Raises
    ------
    ValueError
        On bad input, or when no two samples share a class or a cluster (every
        class a single sample: the F1 is then 0/0; :func:`nmi_score` still scores
        such a clustering).

    See Also
    --------
    nmi_score, clustering_f1_score

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import clustering_scores
    >>> X = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]])
    >>> scores = clustering_scores(X, [0, 0, 1, 1], random_state=0)
    >>> {name: round(value, 3) for name, value in scores.items()}
    {'nmi': 1.0, 'f1': 1.0}
    """
    table = _cluster(X, y, random_state, n_init)
    return {"nmi": _nmi_from_table(table), "f1": _pair_f1_from_table(table)}


@validate_params(_CONSTRAINTS, prefer_skip_nested_validation=True)
def nmi_score(X, y, *, random_state=None, n_init=1):
    """Normalised mutual information between a k-means clustering of ``X`` and ``y``.

    ``X`` is clustered by k-means with as many clusters as classes; then
    ``NMI = 2 I(clusters; classes) / (H(clusters) + H(classes))``, the
    clustering metric of Oh Song et al. used by the ECAML paper (equal to
    ``sklearn.metrics.normalized_mutual_info_score(classes, clusters,
    average_method="arithmetic")``).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings to cluster.
    y : array-like of shape (n_samples,)
        Class labels.
    random_state : int, RandomState instance or None, default=None
        Seed of k-means.
    n_init : int, default=1
        Number of k-means++ initialisations.

    Returns
    -------
    nmi : float
        In [0, 1].

    See Also
    --------
    clustering_scores : NMI and F1 from one k-means run.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import nmi_score
    >>> X = np.array([[0.0], [0.1], [5.0], [5.1], [9.0], [9.2]])
    >>> round(nmi_score(X, [0, 0, 1, 1, 2, 2], random_state=0), 3)
    1.0
    """
    return _nmi_from_table(_cluster(X, y, random_state, n_init))


@validate_params(_CONSTRAINTS, prefer_skip_nested_validation=True)
def clustering_f1_score(X, y, *, random_state=None, n_init=1):
    """Pairwise F1 between a k-means clustering of ``X`` and the classes ``y``.

    A pair of samples is *predicted positive* when both fall in the same
    cluster, and *positive* when both share a class. Precision, recall and F1
    are counted over all ``n (n - 1) / 2`` pairs, but computed from the
    contingency table's non-zero cells in ``O(n log n)`` time and ``O(n)`` memory:
    ``F1 = 2 sum_ij C(n_ij, 2) / (sum_i C(a_i, 2) + sum_j C(b_j, 2))``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings to cluster (k-means with as many clusters as classes).
    y : array-like of shape (n_samples,)
        Class labels.
    random_state : int, RandomState instance or None, default=None
        Seed of k-means.
    n_init : int, default=1
        Number of k-means++ initialisations.

    Returns
    -------
    f1 : float
        In [0, 1].

    Raises
    ------
    ValueError
        On bad input, or when no two samples share a class or a cluster (F1 is
        then 0/0).

    See Also
    --------
    clustering_scores : NMI and F1 from one k-means run.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.metrics import clustering_f1_score
    >>> X = np.array([[0.0], [0.1], [5.0], [5.1], [9.0], [9.2]])
    >>> round(clustering_f1_score(X, [0, 0, 1, 1, 2, 0], random_state=0), 3)
    0.571
    """
    return _pair_f1_from_table(_cluster(X, y, random_state, n_init))
