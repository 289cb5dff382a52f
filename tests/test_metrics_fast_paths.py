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
    map_at_r,
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


# ----------------------------------------------------------------------------------
# MAP@R's relevance path (skdml.metrics._relevance) against a float64 brute force
# ----------------------------------------------------------------------------------
def _bf_relevance_scores(Q, yq, R=None, yr=None, ks=(1,), metric="euclidean"):
    """Recall@k, MAP@R and R-precision of a float64 brute force (ties to the lower index)."""
    exclude_self = R is None
    R, yr = (Q, yq) if exclude_self else (R, yr)
    Q, R = np.asarray(Q, np.float64), np.asarray(R, np.float64)
    if metric == "cosine":  # ||u_q - u_r||^2 of unit rows; an all-zero row: 2 to any row
        def unit(A):
            norm = np.sqrt(np.sum(A * A, axis=1))
            return A / np.where(norm == 0, 1.0, norm)[:, None]
        Q, R = unit(Q), unit(R)
    zero_r = ~np.any(R != 0, axis=1)
    recall, aps, rps = {k: [] for k in ks}, [], []
    for i, q in enumerate(Q):
        d = np.sum((R - q) ** 2, axis=1)
        if metric == "cosine":
            d[zero_r] = 2.0
            if not np.any(q != 0):
                d[:] = 2.0
        order = np.argsort(d, kind="stable")
        if exclude_self:
            order = order[order != i]
        rel = yr[order] == yq[i]
        n_rel = int(rel.sum())
        if n_rel == 0:
            continue
        for k in ks:
            recall[k].append(float(rel[:k].any()))
        top = rel[:n_rel]
        aps.append(np.sum(np.cumsum(top) / np.arange(1, n_rel + 1) * top) / n_rel)
        rps.append(top.sum() / n_rel)
    return ({k: float(np.mean(v)) for k, v in recall.items()}, float(np.mean(aps)),
            float(np.mean(rps)))


@pytest.fixture
def relevance_path(monkeypatch):
    """Send every MAP@R block through the relevance path (short lists, few rows a step)
    and count the rows it settles itself and the rows it hands to the general engine."""
    from skdml.metrics import _relevance

    monkeypatch.setattr(_relevance, "MIN_LIST", 1)
    seen = {"settled": 0, "general": 0, "reranked": 0}
    rank_rows, general, rerank = _relevance._rank_rows, _relevance._rank_block, \
        _relevance._rerank_runs

    def count_rank_rows(*args, **kwargs):
        settled, rel, starts = rank_rows(*args, **kwargs)
        seen["settled"] += int(settled.sum())
        return settled, rel, starts

    def count_general(D, *args):
        seen["general"] += D.shape[0]
        return general(D, *args)

    def count_rerank(*args):
        seen["reranked"] += 1
        return rerank(*args)

    monkeypatch.setattr(_relevance, "_rank_rows", count_rank_rows)
    monkeypatch.setattr(_relevance, "_rank_block", count_general)
    monkeypatch.setattr(_relevance, "_rerank_runs", count_rerank)
    return seen


def _check_relevance(X, y, X_ref=None, y_ref=None, metric="euclidean", ks=(1, 3),
                     batch_size=None):
    recall, expected_map, expected_rp = _bf_relevance_scores(X, y, X_ref, y_ref, ks, metric)
    got = retrieval_scores(X, y, k=list(ks), metric=metric, X_ref=X_ref, y_ref=y_ref,
                           batch_size=batch_size)
    assert got["recall_at_k"] == recall
    assert got["map_at_r"] == pytest.approx(expected_map, abs=1e-12)
    assert got["r_precision"] == pytest.approx(expected_rp, abs=1e-12)
    assert map_at_r(X, y, metric=metric, X_ref=X_ref, y_ref=y_ref,
                    batch_size=batch_size) == got["map_at_r"]


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("batch_size", [None, 7])
def test_relevance_path_matches_bruteforce(relevance_path, monkeypatch, metric, batch_size):
    from skdml.metrics import _relevance

    rng = np.random.RandomState(10)
    y = rng.randint(0, 3, 600)
    X = (rng.randn(600, 4) + 1.5 * rng.randn(3, 4)[y]).astype(np.float32)
    # a few rows a step (R ~ 200 is longer than a step and than a block): many boundaries
    monkeypatch.setattr(_relevance, "_STEP_BYTES", 4 * 600 * 5)
    _check_relevance(X, y, metric=metric, ks=(1, 5, 250), batch_size=batch_size)
    assert relevance_path["settled"] > 0.9 * 2 * 600 and relevance_path["reranked"] > 0


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_relevance_path_far_from_the_origin_reranks_in_float64(relevance_path, metric):
    # An offset leaves float32 few digits: many runs of uncertain gaps mix the labels.
    rng = np.random.RandomState(11)
    y = rng.randint(0, 4, 500)
    X = rng.randn(500, 3) + rng.randn(4, 3)[y] + 3e3
    _check_relevance(X, y, metric=metric)
    assert relevance_path["settled"] > 0 and relevance_path["reranked"] > 0


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_relevance_path_ties_across_classes_go_to_the_lower_index(relevance_path, metric):
    # Every point three times with different labels (exact ties at distance 0), and
    # points on a ring (equal distances across classes); off-grid values.
    rng = np.random.RandomState(12)
    base = rng.randn(150, 3) * 0.1 + 0.3
    angle = np.repeat(np.arange(50) * 2 * np.pi / 50, 3)
    base[:, :2] += np.c_[np.cos(angle), np.sin(angle)]
    X = np.repeat(base, 3, axis=0)
    y = rng.randint(0, 3, 450)
    _check_relevance(X, y, metric=metric, ks=(1, 2, 3, 4))
    assert relevance_path["settled"] > 0


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_relevance_path_on_an_integer_grid(relevance_path, metric):
    rng = np.random.RandomState(13)
    X = rng.randint(-2, 3, (500, 3)).astype(np.float32)  # exact float32: ties by index
    y = rng.randint(0, 3, 500)
    _check_relevance(X, y, metric=metric)
    assert relevance_path["settled"] > 0


def test_relevance_path_cosine_zero_rows_and_lone_queries(relevance_path):
    rng = np.random.RandomState(14)
    y = rng.randint(0, 3, 400)
    X = rng.randn(400, 4) + rng.randn(3, 4)[y]
    X[::37] = 0.0  # all-zero rows: similarity 0 to every row, another zero row included
    y[5], y[6] = 7, 8  # classes of a single sample: left out of the mean
    _check_relevance(X, y, metric="cosine")
    _check_relevance(X[:150], y[:150], X[150:], y[150:], metric="cosine")
    assert relevance_path["settled"] > 0


def test_relevance_path_query_gallery_form(relevance_path):
    X, y = np.random.RandomState(15).randn(700, 5), np.arange(700) % 2
    X[y == 1] += 0.5
    _check_relevance(X[:200], y[:200], X[200:], y[200:], ks=(1, 10, 300))
    assert relevance_path["settled"] > 0


def test_relevance_path_hands_massive_ties_to_the_general_engine(relevance_path):
    # All rows but one equal, off any float32 grid: every value lies at the threshold,
    # far more than the short lists of 30 classes allow.
    X = np.ones((300, 2))
    X[0] = [1e6 + 0.1, 0.3]
    y = np.arange(300) % 30
    _check_relevance(X, y)
    assert relevance_path["general"] > 0


def test_relevance_path_is_the_default_for_long_lists(monkeypatch):
    from skdml.metrics import _relevance

    calls = []
    rank_rows = _relevance._rank_rows
    monkeypatch.setattr(_relevance, "_rank_rows",
                        lambda *a, **kw: calls.append(1) or rank_rows(*a, **kw))
    X, y = np.random.RandomState(16).randn(800, 3), np.arange(800) % 3  # R ~ 266
    _check_relevance(X, y)
    assert calls
