"""The fast paths of the scorers (issue 37) against brute force.

Short neighbour lists select by a threshold from column-group minima; CPU blocks are
ranked side by side in worker threads; clustering with many classes seeds k-means with
skdml's greedy k-means++. Each must give what the plain computation gives.
"""

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score

from skdml.metrics import (
    _clustering,
    _neighbors,
    clustering_scores,
    nearest_neighbors,
    retrieval_scores,
)


def _brute(X, k):
    X = np.asarray(X, dtype=np.float64)
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(axis=2)
    np.fill_diagonal(D, np.inf)
    return np.array([np.lexsort((np.arange(len(X)), row))[:k] for row in D])


@pytest.mark.parametrize("grid", [False, True])
def test_short_lists_from_group_minima_match_brute_force(grid):
    rng = np.random.RandomState(0)
    X = rng.randn(2000, 6).astype(np.float32)
    if grid:  # integers: many exact ties, ranked by index
        X = np.round(X * 2)
    got = nearest_neighbors(X, 8)  # L = 12, 2000 >= 64 L: the group-minima threshold
    np.testing.assert_array_equal(got, _brute(X, 8))


def test_group_minima_threshold_keeps_at_least_L_per_row():
    rng = np.random.RandomState(1)
    part = rng.rand(50, 4000).astype(np.float32)
    part[3, ::100] = 0.0  # 40 tied smallest values: the lowest 12 indices come first
    keys = _neighbors._sorted_keys(part, 12, full=False)
    expected = np.array([np.lexsort((np.arange(4000), row))[:12] for row in part])
    np.testing.assert_array_equal(keys & np.int64(0xFFFFFFFF), expected)


def test_blocks_ranked_by_workers_give_the_sequential_result(monkeypatch):
    rng = np.random.RandomState(2)
    X = rng.randn(1500, 5)
    y = rng.randint(0, 6, 1500)
    sequential = retrieval_scores(X, y, k=[1, 4])
    monkeypatch.setattr(_neighbors, "choose_n_threads", lambda flops=None: 2)
    monkeypatch.setattr(_neighbors, "_CPU_BLOCK_BYTES", 256 * 2**10)  # many small blocks
    seen = []
    for start, stop, nbrs in _neighbors.neighbor_blocks(
            X, X, np.full(1500, 3), exclude_self=True, metric="euclidean", batch_size=None,
            device=torch.device("cpu")):
        seen.append((start, stop))
        np.testing.assert_array_equal(nbrs, _brute(X, 3)[start:stop])
    assert len(seen) > 4 and [s for s, _ in seen] == sorted(s for s, _ in seen)
    assert retrieval_scores(X, y, k=[1, 4]) == sequential


def _reference_greedy_kmeans_pp(Z, k, rng):
    """scikit-learn's greedy k-means++ written plainly in float64 (same random draws)."""
    n = Z.shape[0]
    trials = 2 + int(np.log(k))
    centres = [rng.randint(n)]
    closest = ((Z - Z[centres[0]]) ** 2).sum(axis=1)
    for _ in range(1, k):
        draws = rng.uniform(size=trials) * closest.sum()
        candidates = np.minimum(np.searchsorted(np.cumsum(closest), draws), n - 1)
        d = ((Z[None, :, :] - Z[candidates][:, None, :]) ** 2).sum(axis=2)
        d = np.minimum(d, closest[None, :])
        best = int(np.argmin(d.sum(axis=1)))
        centres.append(candidates[best])
        closest = d[best]
    return np.array(centres)


def test_greedy_seeding_matches_a_plain_reference():
    rng = np.random.RandomState(3)
    Z = rng.randn(300, 4) * 5 + np.repeat(rng.randn(30, 4) * 40, 10, axis=0)
    seeds = _clustering._greedy_kmeans_pp(Z, 30, np.random.RandomState(7))
    expected = _reference_greedy_kmeans_pp(Z, 30, np.random.RandomState(7))
    np.testing.assert_array_equal(seeds, Z[expected])


def test_many_classes_cluster_as_kmeans_from_those_seeds(monkeypatch):
    rng = np.random.RandomState(4)
    y = np.repeat(np.arange(40), 8)
    X = rng.randn(320, 6) + rng.randn(40, 6)[y] * 30
    monkeypatch.setattr(_clustering, "SKLEARN_SEEDING_MAX_CLUSTERS", 10)
    scores = clustering_scores(X, y, random_state=0)
    Z = _clustering._standardise(X)
    seeds = _clustering._greedy_kmeans_pp(Z, 40, np.random.RandomState(0))
    labels = KMeans(40, init=seeds, n_init=1).fit_predict(Z)
    assert scores["nmi"] == pytest.approx(normalized_mutual_info_score(y, labels), abs=1e-12)
    assert scores["nmi"] > 0.95


def test_segments_are_ordered_as_a_lexsort_would():
    rng = np.random.RandomState(5)
    sizes = rng.choice([2, 2, 2, 3, 5, 9], size=400)
    segment = np.repeat(np.arange(sizes.size), sizes)
    dist = rng.randint(0, 4, segment.size).astype(np.float64)  # many exact ties
    ref = rng.permutation(segment.size)
    np.testing.assert_array_equal(_neighbors._order_segments(segment, dist, ref),
                                  np.lexsort((ref, dist, segment)))
