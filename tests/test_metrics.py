"""Tests of skdml.metrics: brute-force references, PML parity, ties, errors, scorers."""

import pickle
import warnings
from itertools import combinations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import normalized_mutual_info_score
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import InvalidParameterError

from skdml.metrics import _clustering, _neighbors
from skdml.metrics import (
    NotATransformerError,
    clustering_f1_scorer,
    clustering_f1_score,
    clustering_scores,
    knn_accuracy,
    map_at_r,
    map_at_r_scorer,
    nearest_neighbors,
    nmi_scorer,
    nmi_score,
    recall_at_k,
    recall_at_k_scorer,
    retrieval_scores,
)


# ----------------------------------------------------------------------------------
# Brute-force references (float64 numpy, one query at a time)
# ----------------------------------------------------------------------------------
def _frame64(*arrays):
    """The arrays times one power of two (exact) putting max |x| near 2**500.

    Scaling by a power of two commutes with float64 rounding, so this is the plain
    float64 brute force wherever that one neither overflows nor underflows, and
    it keeps squares of values up to 1e308 finite.
    """
    peak = max(float(np.max(np.abs(A))) for A in arrays)
    if peak == 0.0:
        return arrays
    return tuple(np.ldexp(np.asarray(A, np.float64), 500 - np.frexp(peak)[1]) for A in arrays)


def _unit_rows(A):
    """Rows divided by their L2 norm in float64 (after an exact power-of-two prescale)."""
    A = np.array(A, dtype=np.float64)
    A = np.ldexp(A, -np.frexp(np.max(np.abs(A), axis=1))[1][:, None])
    norm = np.sqrt(np.sum(A * A, axis=1))
    norm[norm == 0.0] = 1.0  # an all-zero row stays zero: similarity 0 to everything
    return A / norm[:, None]


def _bf_ranking(Q, R, exclude_self, metric):
    """Per query: reference indices sorted by (float64 distance, index); self removed."""
    if metric == "euclidean":
        Q, R = _frame64(Q, R)
    else:  # 2 - 2 cos as ||u_q - u_r||^2 of float64 unit rows; a zero row: 2 (to any row)
        Q, R = _unit_rows(Q), _unit_rows(R)
    orders = []
    for i, q in enumerate(Q):
        d = np.sum((R - q) ** 2, axis=1)
        if metric == "cosine":
            zero_r = ~np.any(R != 0, axis=1)
            d[zero_r] = 2.0
            if not np.any(q != 0):
                d[:] = 2.0
        order = np.argsort(d, kind="stable")  # stable: ties go to the lower index
        if exclude_self:
            order = order[order != i]
        orders.append(order)
    return orders


def bf_neighbors(Q, R=None, k=1, metric="euclidean"):
    """The first ``k`` columns of the brute-force ranking, as an (n_queries, k) array."""
    exclude_self = R is None
    orders = _bf_ranking(Q, Q if exclude_self else R, exclude_self, metric)
    return np.array([order[:k] for order in orders], dtype=np.int64).reshape(len(orders), k)


def bf_scores(Q, yq, R=None, yr=None, ks=(1,), metric="euclidean"):
    """Recall@k for each k and MAP@R, averaged over queries with >= 1 relevant reference."""
    exclude_self = R is None
    if exclude_self:
        R, yr = Q, yq
    yq, yr = np.asarray(yq), np.asarray(yr)
    hits = {k: [] for k in ks}
    aps = []
    for i, order in enumerate(_bf_ranking(Q, R, exclude_self, metric)):
        labels = yr[order]
        rel = labels == yq[i]
        n_relevant = int(rel.sum())
        if n_relevant == 0:
            continue
        for k in ks:
            hits[k].append(float(rel[:k].any()))
        ap = 0.0
        correct = 0
        for rank in range(1, n_relevant + 1):
            if rel[rank - 1]:
                correct += 1
                ap += correct / rank
        aps.append(ap / n_relevant)
    return {k: float(np.mean(v)) for k, v in hits.items()}, float(np.mean(aps))


def bf_pair_f1(labels_true, labels_pred):
    """Pairwise F1 over all n (n - 1) / 2 pairs, by an explicit loop."""
    tp = fp = fn = 0
    for i, j in combinations(range(len(labels_true)), 2):
        same_class = labels_true[i] == labels_true[j]
        same_cluster = labels_pred[i] == labels_pred[j]
        tp += same_class and same_cluster
        fp += same_cluster and not same_class
        fn += same_class and not same_cluster
    if tp == 0:
        return 0.0
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    return 2 * precision * recall / (precision + recall)


def _blobs(n, d, n_classes, seed, spread=1.0):
    rng = np.random.RandomState(seed)
    y = rng.randint(0, n_classes, n)
    centers = rng.randn(n_classes, d) * spread
    X = centers[y] + rng.randn(n, d)
    return X.astype(np.float32), y


# ----------------------------------------------------------------------------------
# Retrieval vs brute force
# ----------------------------------------------------------------------------------
@pytest.fixture(params=["float32 frame", "float64 frame"])
def both_frames(request, monkeypatch):
    """Rank in the float32 frame, then in the float64 one, whatever the lists' depth."""
    wide = request.param == "float64 frame"
    monkeypatch.setattr(_neighbors, "_WIDE_DEPTH", 0)
    monkeypatch.setattr(_neighbors, "_wide_pays", lambda *args: wide)
    return request.param


@pytest.mark.usefixtures("both_frames")
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("batch_size", [None, 1, 7])
def test_retrieval_matches_bruteforce(metric, seed, batch_size):
    X, y = _blobs(80, 5, 6, seed)
    ks = [1, 2, 4, 8, 79]
    expected_recall, expected_map = bf_scores(X, y, ks=ks, metric=metric)
    got = recall_at_k(X, y, k=ks, metric=metric, batch_size=batch_size)
    assert list(got) == ks
    for k in ks:
        assert got[k] == pytest.approx(expected_recall[k], abs=1e-12)
    assert map_at_r(X, y, metric=metric, batch_size=batch_size) == pytest.approx(
        expected_map, abs=1e-12)
    both = retrieval_scores(X, y, k=ks, metric=metric, batch_size=batch_size)
    assert both["recall_at_k"] == got
    assert both["map_at_r"] == pytest.approx(expected_map, abs=1e-12)


def test_each_query_scores_the_same_bits_in_any_block():
    # a query's AP comes from its own row alone (no BLAS product over the block's rows,
    # whose rounding depends on them), so shards and block sizes agree bit for bit
    from skdml.metrics._retrieval import query_scores

    X, y = _blobs(1200, 6, 2, seed=12)  # R_q about 600

    def ap(batch_size):
        return query_scores(X, y, [1], want_map=True, metric="euclidean", X_ref=None,
                            y_ref=None, batch_size=batch_size, device="cpu")["ap"]

    reference = ap(None)
    for batch_size in (1, 7, 64, 1199):
        np.testing.assert_array_equal(ap(batch_size), reference)


@pytest.mark.usefixtures("both_frames")
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("batch_size", [None, 3])
def test_query_reference_form_matches_bruteforce(metric, batch_size):
    Q, yq = _blobs(40, 4, 5, seed=3)
    R, yr = _blobs(60, 4, 7, seed=4)  # classes 5 and 6 only in the gallery
    yq[:3] = 9  # class absent from the gallery: lone queries, left out
    ks = [1, 3, 60]
    expected_recall, expected_map = bf_scores(Q, yq, R, yr, ks=ks, metric=metric)
    got = recall_at_k(Q, yq, k=ks, metric=metric, X_ref=R, y_ref=yr, batch_size=batch_size)
    assert got == pytest.approx(expected_recall, abs=1e-12)
    assert map_at_r(Q, yq, metric=metric, X_ref=R, y_ref=yr, batch_size=batch_size) == \
        pytest.approx(expected_map, abs=1e-12)


def test_query_reference_form_does_not_exclude_anything():
    # The gallery contains the queries: each query then finds itself first.
    X, y = _blobs(30, 3, 4, seed=5)
    assert recall_at_k(X, y, k=1, X_ref=X, y_ref=y) == 1.0
    assert recall_at_k(X, y, k=1) < 1.0


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    n=st.integers(2, 25),
    d=st.integers(1, 3),
    n_classes=st.integers(2, 4),
    batch_size=st.one_of(st.none(), st.integers(1, 6)),
)
def test_ties_and_duplicates_match_bruteforce(data, n, d, n_classes, batch_size):
    # Small integer coordinates: many exact duplicates and tied distances, all
    # exactly representable in float32, so the tie-breaking (lower index first)
    # is tested exactly against a stable float64 sort.
    X = np.array(data.draw(st.lists(st.lists(st.integers(0, 2), min_size=d, max_size=d),
                                    min_size=n, max_size=n)), dtype=np.float32)
    y = np.array(data.draw(st.lists(st.integers(0, n_classes - 1), min_size=n, max_size=n)))
    if np.unique(y).size < 2 or np.bincount(y).max() < 2:
        with pytest.raises(ValueError):
            retrieval_scores(X, y, k=1)
        return
    ks = sorted({1, min(2, n - 1), n - 1})
    expected_recall, expected_map = bf_scores(X, y, ks=ks)
    got = retrieval_scores(X, y, k=ks, batch_size=batch_size)
    assert got["recall_at_k"] == pytest.approx(expected_recall, abs=1e-12)
    assert got["map_at_r"] == pytest.approx(expected_map, abs=1e-12)


def test_duplicates_of_the_query_count_as_neighbours():
    # Self-exclusion is by index: an exact duplicate at distance 0 still counts.
    X = np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 0.0], [3.0, 0.0]])
    y = np.array([0, 0, 1, 1])
    assert recall_at_k(X, y, k=1) == 1.0
    assert map_at_r(X, y) == 1.0


def test_ties_are_broken_by_lower_index_deterministically():
    # All points coincide: every neighbour is tied, so the ranking is by index.
    # Query 0 ranks 1, 2, 3; query 1 ranks 0, 2, 3; queries 2, 3 rank 0 first.
    X = np.zeros((4, 3), dtype=np.float32)
    y = np.array([0, 0, 1, 1])
    expected_recall, expected_map = bf_scores(X, y, ks=[1, 2, 3])
    for batch_size in (None, 1, 2):
        got = retrieval_scores(X, y, k=[1, 2, 3], batch_size=batch_size)
        assert got["recall_at_k"] == expected_recall
        assert got["map_at_r"] == pytest.approx(expected_map)
    # Reversing the order of the points changes which tied neighbour comes first.
    assert recall_at_k(X, y, k=1) == pytest.approx(0.5)
    assert recall_at_k(X[::-1], y[::-1], k=1) == pytest.approx(0.5)


def test_lone_queries_are_left_out():
    X, y = _blobs(50, 3, 4, seed=6)
    y[0], y[1] = 10, 11  # two singleton classes
    expected_recall, expected_map = bf_scores(X, y, ks=[1, 5])
    assert recall_at_k(X, y, k=[1, 5]) == pytest.approx(expected_recall, abs=1e-12)
    assert map_at_r(X, y) == pytest.approx(expected_map, abs=1e-12)
    # Gallery form: a query class absent from the gallery makes a lone query.
    Q, yq = _blobs(20, 3, 4, seed=7)
    yq[:5] = 42
    expected_recall, expected_map = bf_scores(Q, yq, X, y, ks=[1, 5])
    names = np.array([f"c{v}" for v in range(50)])
    got = retrieval_scores(Q, names[yq], k=[1, 5], X_ref=X, y_ref=names[y])
    assert got["recall_at_k"] == pytest.approx(expected_recall, abs=1e-12)
    assert got["map_at_r"] == pytest.approx(expected_map, abs=1e-12)


def test_return_types():
    X, y = _blobs(20, 3, 3, seed=7)
    assert isinstance(recall_at_k(X, y, k=2), float)
    assert isinstance(recall_at_k(X, y, k=np.int64(2)), float)
    assert recall_at_k(X, y, k=np.int64(2)) == recall_at_k(X, y, k=2)
    got = recall_at_k(X, y, k=(4, 1))
    assert isinstance(got, dict) and list(got) == [4, 1]
    assert got[1] == recall_at_k(X, y, k=1)
    assert isinstance(map_at_r(X, y), float)


def test_labels_stay_labels():
    X, y = _blobs(40, 3, 3, seed=8)
    reference = recall_at_k(X, y, k=[1, 3])
    # Strings and any integer dtype give the same result.
    names = np.array(["cat", "dog", "emu"])[y]
    assert recall_at_k(X, names, k=[1, 3]) == reference
    assert recall_at_k(X, y.astype(np.uint8), k=[1, 3]) == reference
    assert map_at_r(X, names) == map_at_r(X, y)
    # 2**24 and 2**24 + 1 are different labels, equal once cast to float32.
    big = np.where(y == 0, 2**24, 2**24 + y).astype(np.int64)
    assert recall_at_k(X, big, k=[1, 3]) == reference
    assert map_at_r(X, big) == map_at_r(X, y)


def test_input_dtype_and_containers():
    X, y = _blobs(30, 4, 3, seed=9)
    reference = retrieval_scores(X, y, k=[1, 2])
    assert retrieval_scores(X.astype(np.float64), y, k=[1, 2]) == reference
    assert retrieval_scores(X.tolist(), list(y), k=[1, 2]) == reference
    pd = pytest.importorskip("pandas")
    assert retrieval_scores(pd.DataFrame(X), pd.Series(y), k=[1, 2]) == reference


@pytest.mark.usefixtures("both_frames")
@pytest.mark.parametrize("factor", [1e25, 1e-25])
def test_extreme_scales_do_not_overflow(factor):
    X, y = _blobs(30, 4, 3, seed=10)
    X64 = X.astype(np.float64)
    assert retrieval_scores(X64 * factor, y, k=[1, 4]) == retrieval_scores(X64, y, k=[1, 4])


@pytest.mark.usefixtures("both_frames")
def test_data_far_from_the_origin_keep_their_ranking():
    # ||r||^2 - 2 <q, r> in float32 loses the ranking to cancellation when the
    # data sit far from the origin, unless they are centred first.
    X, y = _blobs(80, 5, 6, seed=23)
    X = X + np.float32(3e3)
    expected_recall, expected_map = bf_scores(X, y, ks=[1, 2, 8])
    got = retrieval_scores(X, y, k=[1, 2, 8], batch_size=13)
    assert got["recall_at_k"] == pytest.approx(expected_recall, abs=1e-12)
    assert got["map_at_r"] == pytest.approx(expected_map, abs=1e-12)
    Q, yq = _blobs(30, 5, 6, seed=24)
    got = retrieval_scores(Q + np.float32(3e3), yq, k=[1, 3], X_ref=X, y_ref=y)
    expected = bf_scores(Q + np.float32(3e3), yq, X, y, ks=[1, 3])
    assert got["recall_at_k"] == pytest.approx(expected[0], abs=1e-12)
    assert got["map_at_r"] == pytest.approx(expected[1], abs=1e-12)


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_read_only_input_is_accepted_silently(metric):
    X, y = _blobs(30, 4, 3, seed=25)
    expected = retrieval_scores(X, y, k=[1, 2], metric=metric)
    X.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert retrieval_scores(X, y, k=[1, 2], metric=metric) == expected
        assert retrieval_scores(X, y, k=[1, 2], metric=metric, X_ref=X, y_ref=y)


def test_cosine_zero_vector_is_finite():
    X, y = _blobs(30, 4, 3, seed=11)
    X[0] = 0.0
    expected = bf_scores(X, y, ks=[1, 3], metric="cosine")
    got = retrieval_scores(X, y, k=[1, 3], metric="cosine")
    assert got["recall_at_k"] == pytest.approx(expected[0], abs=1e-12)
    assert got["map_at_r"] == pytest.approx(expected[1], abs=1e-12)


def test_blocks_respect_the_memory_budget(monkeypatch):
    # With a 64 KiB budget and 500 references each block holds few query rows;
    # the result does not depend on the blocking.
    X, y = _blobs(500, 4, 10, seed=12)
    expected = retrieval_scores(X, y, k=[1, 4])
    monkeypatch.setattr(_neighbors, "_BLOCK_BYTES", 64 * 2**10)
    monkeypatch.setattr(_neighbors, "_CPU_BLOCK_BYTES", 64 * 2**10)
    depth = np.full(500, 4)
    rows = [stop - start for start, stop, _ in _neighbors.neighbor_blocks(
        X, X, depth, exclude_self=True, metric="euclidean", batch_size=None,
        device=torch.device("cpu"))]
    assert sum(rows) == 500
    assert max(rows) * 500 * 4 <= 64 * 2**10
    assert retrieval_scores(X, y, k=[1, 4]) == expected


# ----------------------------------------------------------------------------------
# Exactness for any finite input: float64 brute force, same tie-breaking
# ----------------------------------------------------------------------------------
def _reported_data():
    """The reported case: 10 classes of 20 in 8-D, one row moved to 1e7."""
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(10), 20)
    X = rng.randn(200, 8) + 1.5 * rng.randn(10, 8)[y]
    X[0] = 1e7
    return X, y


def _mixed_scales(seed=0):
    """Half the rows at scale 1e150, half at 1e-150 (both far inside float64)."""
    rng = np.random.RandomState(seed)
    y = rng.randint(0, 5, 120)
    X = rng.randn(120, 6) + 2.0 * rng.randn(5, 6)[y]
    X[::2] *= 1e150
    X[1::2] *= 1e-150
    return X, y


_EXTREME = {
    "outlier_1e7": lambda X: X,
    "offset_1e8": lambda X: X + 1e8,
    "scale_1e150": lambda X: X * 1e150,
    "scale_1e-150": lambda X: X * 1e-150,
}
# Cosine is blind to a row's scale, so only the offset breaks a float32 cosine.
_EXTREME_CASES = [(name, "euclidean") for name in _EXTREME] + [("offset_1e8", "cosine")]


def _check_against_bruteforce(Q, yq, R=None, yr=None, metric="euclidean", ks=(1, 2, 4, 8),
                              batch_size=None):
    expected_recall, expected_map = bf_scores(Q, yq, R, yr, ks=list(ks), metric=metric)
    got = retrieval_scores(Q, yq, k=list(ks), metric=metric, X_ref=R, y_ref=yr,
                           batch_size=batch_size)
    assert got["recall_at_k"] == expected_recall
    assert got["map_at_r"] == pytest.approx(expected_map, abs=1e-12)
    k = max(ks)
    assert np.array_equal(nearest_neighbors(Q, k, X_ref=R, metric=metric, batch_size=batch_size),
                          bf_neighbors(Q, R, k, metric))


@pytest.mark.usefixtures("both_frames")
@pytest.mark.parametrize("name, metric", _EXTREME_CASES)
def test_reported_extreme_inputs_match_bruteforce(name, metric):
    X, y = _reported_data()
    X = _EXTREME[name](X)
    _check_against_bruteforce(X, y, metric=metric)
    _check_against_bruteforce(X, y, metric=metric, batch_size=7)
    if (name, metric) == ("outlier_1e7", "euclidean"):  # the figures of the report
        assert recall_at_k(X, y) == pytest.approx(0.815)
        assert map_at_r(X, y) == pytest.approx(bf_scores(X, y)[1], abs=1e-12)


@pytest.mark.usefixtures("both_frames")
@pytest.mark.parametrize("name, metric", _EXTREME_CASES)
def test_extreme_inputs_query_gallery_form(name, metric):
    X, y = _reported_data()
    X = _EXTREME[name](X)
    query = np.arange(200) % 4 == 0  # the outlier (row 0) is a query
    _check_against_bruteforce(X[query], y[query], X[~query], y[~query], metric=metric)
    # The outlier in the gallery instead.
    _check_against_bruteforce(X[~query][1:], y[~query][1:], X[query], y[query],
                              metric=metric)


@pytest.mark.usefixtures("both_frames")
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_mixed_huge_and_tiny_rows_match_bruteforce(metric):
    X, y = _mixed_scales()
    _check_against_bruteforce(X, y, metric=metric)
    _check_against_bruteforce(X[:40], y[:40], X[40:], y[40:], metric=metric, batch_size=9)


@pytest.mark.usefixtures("both_frames")
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("scale", [1e-150, 1.0, 1e150])
def test_duplicates_and_ties_with_an_outlier_match_bruteforce(metric, scale):
    # Every point three times (ties at distance 0, broken by index), a row far
    # away, an offset: float32 alone cannot rank these.
    rng = np.random.RandomState(3)
    base = rng.randn(30, 5) + 2.0 * rng.randn(3, 5)[np.arange(30) % 3]
    X = (np.repeat(base, 3, axis=0) + 1e6) * scale
    X[5] = 1e13 * scale
    y = np.repeat(np.arange(30) % 3, 3)
    _check_against_bruteforce(X, y, metric=metric, ks=(1, 2, 3, 7))


@pytest.mark.usefixtures("both_frames")
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_integer_grid_far_from_the_centre_matches_bruteforce(metric):
    # Integers (float32 ranks a small grid exactly), but one cluster sits 2**22 away
    # from the other: there float32 cannot hold ||r||^2 - 2 <q, r> exactly, and its
    # many exact ties must still be broken by index.
    rng = np.random.RandomState(5)
    X = rng.randint(0, 3, (160, 3)).astype(np.float64)
    X[80:] += 2.0 ** 22
    y = rng.randint(0, 3, 160)
    _check_against_bruteforce(X, y, metric=metric, ks=(1, 2, 5, 20))


@st.composite
def _nasty_embeddings(draw):
    """Small data sets with extreme scales, offsets, outliers, duplicates and grids."""
    n = draw(st.integers(4, 30))
    d = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.RandomState(seed)
    if draw(st.booleans()):
        X = rng.randint(-2, 3, (n, d)).astype(np.float64)  # a grid: exact ties
    else:
        X = rng.randn(n, d)
    if draw(st.booleans()):
        X[rng.randint(n)] = X[rng.randint(n)]  # an exact duplicate
    X = X * 10.0 ** draw(st.integers(-150, 150))
    if draw(st.booleans()):
        X[rng.randint(n)] *= 10.0 ** draw(st.integers(2, 12))  # an outlier
    if draw(st.booleans()):
        X = X + np.abs(X).max() * 10.0 ** draw(st.integers(1, 9))  # far from the origin
    y = rng.randint(0, draw(st.integers(2, 4)), n)
    return X, y


@pytest.mark.usefixtures("both_frames")
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # one patch per run
@given(data=_nasty_embeddings(), metric=st.sampled_from(["euclidean", "cosine"]),
       gallery=st.booleans())
def test_random_extreme_inputs_match_bruteforce(data, metric, gallery):
    X, y = data
    if gallery:
        Q, yq, R, yr = X[: len(X) // 2], y[: len(y) // 2], X[len(X) // 2:], y[len(y) // 2:]
        k = R.shape[0]
        scorable = np.unique(yr).size >= 2 and np.isin(yq, yr).any()
    else:
        Q, yq, R, yr = X, y, None, None
        k = X.shape[0] - 1
        scorable = np.unique(y).size >= 2 and np.bincount(y).max() >= 2
    if scorable:
        expected = bf_scores(Q, yq, R, yr, ks=[1, 2, k], metric=metric)
        got = retrieval_scores(Q, yq, k=[1, 2, k], metric=metric, X_ref=R, y_ref=yr)
        assert got["recall_at_k"] == expected[0]
        assert got["map_at_r"] == pytest.approx(expected[1], abs=1e-12)
    # The whole ranking, every position.
    assert np.array_equal(nearest_neighbors(Q, k, X_ref=R, metric=metric),
                          bf_neighbors(Q, R, k, metric))


@pytest.mark.parametrize("wide", [False, True])
@settings(max_examples=40, deadline=None)
@given(data=_nasty_embeddings(), metric=st.sampled_from(["euclidean", "cosine"]))
def test_error_bounds_contain_the_float64_distance(wide, data, metric):
    # The certificate itself: every candidate's interval holds its brute-force
    # distance, and the bound for unlisted references is below all of theirs; in
    # the float32 frame and in the float64 one.
    from skdml.metrics._exact import Frame

    X, _ = data
    frame = Frame(X, X, exclude_self=False, metric=metric, device=torch.device("cpu"),
                  wide=wide)
    n = X.shape[0]
    with torch.inference_mode():
        vals, idx = torch.sort(frame.distances(slice(0, n), False), dim=1, stable=True)
    vals, idx = vals.numpy(), idx.numpy()
    rows = np.arange(n)
    v = frame.estimate(vals, rows)
    lo, hi = frame.intervals(v, rows, idx)
    exact = frame.exact_distances(np.repeat(rows, n), idx.ravel()).reshape(n, n)
    with np.errstate(over="ignore", under="ignore"):
        exact = np.ldexp(exact, frame.frame_exp)
    # all-zero cosine queries are not searched: every reference is at 2 (index order)
    searched = rows if frame.zero_queries is None else rows[~frame.zero_queries]
    lo, hi, exact, v = lo[searched], hi[searched], exact[searched], v[searched]
    assert np.all(lo <= exact) and np.all(exact <= hi)
    for j in range(n):  # unlisted beyond position j: every later candidate
        beyond = frame.beyond(v[:, j], searched)
        assert np.all(beyond[:, None] <= exact[:, j:])


def test_ordinary_data_barely_touch_float64(monkeypatch):
    # Float32 ranks ordinary embeddings with certainty almost everywhere: the
    # float64 pass sees a small fraction of the listed candidates.
    from skdml.metrics._exact import Frame

    X, y = _blobs(1500, 16, 30, seed=4, spread=0.8)
    seen = []
    original = Frame.exact_distances

    def counting(self, qi, rj):
        seen.append(qi.size)
        return original(self, qi, rj)

    monkeypatch.setattr(Frame, "exact_distances", counting)
    expected_recall = recall_at_k(X, y, k=[1, 2, 4, 8])
    assert sum(seen) <= 0.01 * 1500 * 8
    seen.clear()
    assert map_at_r(X, y) == pytest.approx(bf_scores(X, y)[1], abs=1e-12)
    assert sum(seen) <= 0.05 * 1500 * 50  # R_q is about 50
    assert expected_recall == bf_scores(X, y, ks=[1, 2, 4, 8])[0]


# ----------------------------------------------------------------------------------
# Public neighbour functions
# ----------------------------------------------------------------------------------
@pytest.mark.usefixtures("both_frames")
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("batch_size", [None, 5])
def test_nearest_neighbors_matches_bruteforce(metric, batch_size):
    X, _ = _blobs(60, 4, 5, seed=30)
    R, _ = _blobs(45, 4, 5, seed=31)
    assert np.array_equal(nearest_neighbors(X, 59, metric=metric, batch_size=batch_size),
                          bf_neighbors(X, None, 59, metric))
    got = nearest_neighbors(X, 10, X_ref=R, metric=metric, batch_size=batch_size)
    assert got.dtype == np.int64 and got.shape == (60, 10)
    assert np.array_equal(got, bf_neighbors(X, R, 10, metric))


def test_nearest_neighbors_accepts_tensors_and_breaks_ties_by_index():
    X, _ = _blobs(40, 3, 4, seed=32)
    expected = nearest_neighbors(X, 5)
    assert np.array_equal(nearest_neighbors(torch.from_numpy(X), 5), expected)
    leaf = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    assert np.array_equal(nearest_neighbors(leaf, 5), expected)
    assert np.array_equal(nearest_neighbors(X, 5, X_ref=torch.from_numpy(X[::-1].copy())),
                          bf_neighbors(X, X[::-1], 5))
    # Identical points: the order is by index, the query itself left out.
    same = np.ones((4, 2))
    assert nearest_neighbors(same, 3).tolist() == [[1, 2, 3], [0, 2, 3], [0, 1, 3],
                                                   [0, 1, 2]]


def test_nearest_neighbors_errors():
    X, _ = _blobs(10, 3, 2, seed=33)
    with pytest.raises(ValueError, match="too large"):
        nearest_neighbors(X, 10)
    assert nearest_neighbors(X, 10, X_ref=X).shape == (10, 10)
    with pytest.raises(InvalidParameterError, match="'k' parameter of nearest_neighbors"):
        nearest_neighbors(X, 0)
    with pytest.raises(InvalidParameterError, match="'metric' parameter"):
        nearest_neighbors(X, 1, metric="l1")
    with pytest.raises(ValueError, match="features"):
        nearest_neighbors(X, 1, X_ref=X[:, :2])
    with pytest.raises(ValueError, match="NaN"):
        nearest_neighbors(np.full((3, 2), np.nan), 1)


def _bf_knn_accuracy(Q, yq, R, yr, ks, metric="euclidean"):
    order = bf_neighbors(Q, R, max(ks), metric)
    classes = np.unique(np.concatenate([yq, yr]))
    out = []
    for k in ks:
        correct = 0
        for i in range(len(Q)):
            votes = [np.sum(yr[order[i, :k]] == c) for c in classes]
            correct += classes[int(np.argmax(votes))] == yq[i]  # first max: smallest label
        out.append(correct / len(Q))
    return out


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_knn_accuracy_matches_bruteforce_votes(metric):
    Q, yq = _blobs(70, 3, 4, seed=34, spread=0.6)
    R, yr = _blobs(90, 3, 4, seed=35, spread=0.6)
    yq[:4] = 7  # a class absent from the references: always wrong
    ks = [1, 2, 4, 10, 90]  # even k: tied votes go to the smallest label
    expected = _bf_knn_accuracy(Q, yq, R, yr, ks, metric)
    got = knn_accuracy(Q, yq, R, yr, k=ks, metric=metric, batch_size=11)
    assert got == pytest.approx(expected, abs=1e-12)
    names = np.array([f"c{i}" for i in range(8)])
    assert knn_accuracy(Q, names[yq], R, names[yr], k=ks, metric=metric) == got
    assert knn_accuracy(Q, yq, R, yr, k=4, metric=metric) == [got[2]]
    with pytest.raises(ValueError, match="too large"):
        knn_accuracy(Q, yq, R, yr, k=91)


@pytest.mark.usefixtures("both_frames")
def test_knn_accuracy_is_exact_at_extreme_scales():
    X, y = _reported_data()
    Q, yq, R, yr = X[::4], y[::4], np.delete(X, np.s_[::4], 0), np.delete(y, np.s_[::4])
    expected = _bf_knn_accuracy(Q, yq, R, yr, [1, 10])
    for factor in (1.0, 1e150, 1e-150):
        assert knn_accuracy(Q * factor, yq, R * factor, yr) == pytest.approx(expected,
                                                                           abs=1e-12)


# ----------------------------------------------------------------------------------
# Parity with pytorch-metric-learning
# ----------------------------------------------------------------------------------
def _pml_calculator(metric):
    pytest.importorskip("pytorch_metric_learning")
    from pytorch_metric_learning.distances import CosineSimilarity, LpDistance
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from pytorch_metric_learning.utils.inference import CustomKNN

    distance = (LpDistance(normalize_embeddings=False) if metric == "euclidean"
                else CosineSimilarity())
    return AccuracyCalculator(include=("precision_at_1", "mean_average_precision_at_r"),
                              k="max_bin_count", device=torch.device("cpu"),
                              knn_func=CustomKNN(distance))


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_pml_accuracy_calculator(metric, seed):
    X, y = _blobs(300, 8, 12, seed=seed, spread=0.7)
    y[0] = 99  # a singleton class: PML leaves it out, so do we
    pml = _pml_calculator(metric).get_accuracy(X, y)
    assert recall_at_k(X, y, k=1, metric=metric) == pytest.approx(pml["precision_at_1"],
                                                                  abs=1e-12)
    assert map_at_r(X, y, metric=metric) == pytest.approx(
        pml["mean_average_precision_at_r"], abs=1e-12)


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_matches_pml_query_reference_form(metric):
    Q, yq = _blobs(100, 6, 8, seed=2)
    R, yr = _blobs(150, 6, 10, seed=3)
    pml = _pml_calculator(metric).get_accuracy(Q, yq, R, yr)
    assert recall_at_k(Q, yq, metric=metric, X_ref=R, y_ref=yr) == pytest.approx(
        pml["precision_at_1"], abs=1e-12)
    assert map_at_r(Q, yq, metric=metric, X_ref=R, y_ref=yr) == pytest.approx(
        pml["mean_average_precision_at_r"], abs=1e-12)


# ----------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize("func", [recall_at_k, map_at_r, nmi_score, clustering_f1_score])
def test_bad_embeddings_raise(func):
    X, y = _blobs(20, 3, 3, seed=13)
    bad_nan, bad_inf = X.copy(), X.copy()
    bad_nan[2, 1], bad_inf[3, 0] = np.nan, np.inf
    for Xbad, match in [(bad_nan, "NaN"), (bad_inf, "infinity"),
                        (X[:0], "0 sample"), (X[:, 0], "2D array"),
                        (X[:, :, None], "dim")]:
        with pytest.raises(ValueError, match=match):
            func(Xbad, y[: len(Xbad)])


@pytest.mark.parametrize("func", [recall_at_k, map_at_r, nmi_score, clustering_f1_score])
def test_bad_labels_raise(func):
    X, y = _blobs(20, 3, 3, seed=14)
    with pytest.raises(ValueError, match="inconsistent lengths"):
        func(X, y[:-1])
    with pytest.raises(ValueError, match="single class"):
        func(X, np.zeros(20, dtype=int))
    with pytest.raises(ValueError, match="1-D"):
        func(X, np.stack([y, y], axis=1))
    with pytest.raises(ValueError, match="discrete"):
        func(X, np.linspace(0, 1, 20))
    with pytest.raises(InvalidParameterError, match="'y' parameter of .* array-like"):
        func(X, None)


def test_bad_k_raises():
    X, y = _blobs(10, 3, 2, seed=15)
    assert isinstance(recall_at_k(X, y, k=9), float)  # n_samples - 1 is the largest k
    for k in (10, 11, [1, 10]):
        with pytest.raises(ValueError, match="too large"):
            recall_at_k(X, y, k=k)
    for k in (0, -1, 1.5, "3", None):
        with pytest.raises(InvalidParameterError, match="'k' parameter of recall_at_k"):
            recall_at_k(X, y, k=k)
    for k in (True, [], [1, 0], [1, 1.5], [[1, 2]]):
        with pytest.raises(ValueError, match="^k must be"):
            recall_at_k(X, y, k=k)
    R, yr = _blobs(5, 3, 2, seed=16)
    assert isinstance(recall_at_k(X, y, k=5, X_ref=R, y_ref=yr), float)
    with pytest.raises(ValueError, match="too large"):
        recall_at_k(X, y, k=6, X_ref=R, y_ref=yr)
    with pytest.raises(InvalidParameterError, match="'k' parameter of recall_at_k_scorer"):
        recall_at_k_scorer(k=[1, 2])
    with pytest.raises(ValueError, match="^k must be"):
        recall_at_k_scorer(k=True)


def test_other_bad_arguments_raise():
    X, y = _blobs(20, 3, 3, seed=17)
    with pytest.raises(InvalidParameterError, match="'metric' parameter of recall_at_k"):
        recall_at_k(X, y, metric="manhattan")
    with pytest.raises(ValueError, match="together"):
        recall_at_k(X, y, X_ref=X)
    with pytest.raises(ValueError, match="features"):
        recall_at_k(X, y, X_ref=X[:, :2], y_ref=y)
    with pytest.raises(ValueError, match="inconsistent lengths"):
        recall_at_k(X, y, X_ref=X, y_ref=y[:-1])
    with pytest.raises(ValueError, match="single class"):
        map_at_r(X, y, X_ref=X, y_ref=np.zeros(20, dtype=int))
    with pytest.raises(InvalidParameterError, match="'batch_size' parameter of recall_at_k"):
        recall_at_k(X, y, batch_size=0)
    with pytest.raises(ValueError, match="at least 2"):
        recall_at_k(X[:1], y[:1])
    with pytest.raises(ValueError, match="No query"):
        map_at_r(X[:3], np.array([0, 1, 2]))  # every class is a singleton
    with pytest.raises(ValueError, match="No query"):
        recall_at_k(X, np.full(20, 7), X_ref=X, y_ref=y)  # query class not in gallery
    with pytest.raises(InvalidParameterError, match="'n_init' parameter of nmi_score"):
        nmi_score(X, y, n_init=0)


# ----------------------------------------------------------------------------------
# Clustering scores
# ----------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.integers(2, 40))
def test_table_scores_match_references(data, n):
    classes = np.array(data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)))
    clusters = np.array(data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)))
    _, c1 = np.unique(classes, return_inverse=True)
    _, c2 = np.unique(clusters, return_inverse=True)
    table = _clustering._contingency(c1, c2)
    assert table.sum() == n
    assert _clustering._nmi_from_table(table) == pytest.approx(
        normalized_mutual_info_score(classes, clusters, average_method="arithmetic"),
        abs=1e-10)
    same_class = sum(a == b for a, b in combinations(classes, 2))
    same_cluster = sum(a == b for a, b in combinations(clusters, 2))
    if same_class + same_cluster == 0:
        with pytest.raises(ValueError, match="undefined"):
            _clustering._pair_f1_from_table(table)
    else:
        assert _clustering._pair_f1_from_table(table) == pytest.approx(
            bf_pair_f1(classes, clusters), abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_clustering_scores_match_kmeans_and_bruteforce(seed):
    X, y = _blobs(120, 4, 5, seed=seed, spread=2.0)
    clusters = KMeans(n_clusters=5, n_init=1, random_state=seed).fit_predict(X)
    expected_nmi = normalized_mutual_info_score(y, clusters, average_method="arithmetic")
    expected_f1 = bf_pair_f1(y, clusters)
    assert nmi_score(X, y, random_state=seed) == pytest.approx(expected_nmi, abs=1e-10)
    assert clustering_f1_score(X, y, random_state=seed) == pytest.approx(expected_f1,
                                                                         abs=1e-12)
    both = clustering_scores(X, y, random_state=seed)
    assert both == pytest.approx({"nmi": expected_nmi, "f1": expected_f1}, abs=1e-10)
    # String labels give the same scores.
    names = np.array(list("abcde"))[y]
    assert clustering_scores(X, names, random_state=seed) == both


def test_clustering_scores_perfect_and_random():
    X, y = _blobs(100, 3, 4, seed=20, spread=50.0)  # well separated blobs
    assert clustering_scores(X, y, random_state=0, n_init=3) == pytest.approx(
        {"nmi": 1.0, "f1": 1.0})
    rng = np.random.RandomState(0)
    noise = rng.randn(400, 3)
    scores = clustering_scores(noise, rng.randint(0, 4, 400), random_state=0)
    assert scores["nmi"] < 0.1 and scores["f1"] < 0.4


@pytest.mark.parametrize("factor, shift", [(1e-155, 0.0), (1e155, 0.0), (1e155, 1e160),
                                           (1e-155, 3e-150), (1e-300, 0.0), (1e300, 0.0)])
def test_clustering_scores_are_invariant_to_scale_and_translation(factor, shift):
    # k-means' partition is invariant to a global positive scale and a translation;
    # at 1e+-155 its squared distances would overflow or underflow without the
    # robust float64 standardisation.
    rng = np.random.RandomState(4)
    y = rng.randint(0, 5, 150)
    X = 2.0 * rng.randn(5, 4)[y] + rng.randn(150, 4)
    reference = clustering_scores(X, y, random_state=0)
    assert reference["nmi"] > 0.5  # a real clustering, not a degenerate one
    moved = X * factor + shift
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no KMeans overflow or convergence warning
        assert clustering_scores(moved, y, random_state=0) == reference
        assert nmi_score(moved, y, random_state=0) == reference["nmi"]
        assert clustering_f1_score(moved, y, random_state=0) == reference["f1"]


@pytest.mark.parametrize("func", [nmi_score, clustering_f1_score, clustering_scores])
def test_clustering_of_identical_points_is_undefined(func):
    X = np.full((12, 3), 2.5)
    with pytest.raises(ValueError, match="identical.*undefined"):
        func(X, np.arange(12) % 3)
    X[0, 0] = 2.6  # two distinct points are enough to cluster into two
    func(X, np.arange(12) % 2, random_state=0)


# ----------------------------------------------------------------------------------
# Scorers
# ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    rng = np.random.RandomState(0)
    keep = rng.choice(len(y), 600, replace=False)
    return X[keep], y[keep]


def _class_disjoint_cv(y, n_splits=2):
    """Class-disjoint folds (ClassDisjointSplit where present, else GroupKFold)."""
    try:
        from skdml.model_selection import ClassDisjointSplit
    except ImportError:
        return list(GroupKFold(n_splits).split(np.zeros(len(y)), y, groups=y))
    return list(ClassDisjointSplit(n_splits=n_splits, random_state=0).split(
        np.zeros((len(y), 1)), y))


@pytest.mark.parametrize("scorer, func, kwargs", [
    (recall_at_k_scorer(k=2), recall_at_k, {"k": 2}),
    (recall_at_k_scorer(k=1, metric="cosine"), recall_at_k, {"k": 1, "metric": "cosine"}),
    (map_at_r_scorer(), map_at_r, {}),
    (nmi_scorer(), nmi_score, {"random_state": 0}),
    (clustering_f1_scorer(random_state=3), clustering_f1_score, {"random_state": 3}),
])
def test_scorers_in_cross_val_score(digits, scorer, func, kwargs):
    X, y = digits
    cv = _class_disjoint_cv(y)
    for train, test in cv:
        assert not set(y[train]) & set(y[test])
    model = make_pipeline(StandardScaler(), PCA(8, svd_solver="covariance_eigh"))
    scores = cross_val_score(model, X, y, cv=cv, scoring=scorer, error_score="raise")
    expected = []
    for train, test in cv:
        fitted = make_pipeline(StandardScaler(), PCA(8, svd_solver="covariance_eigh"))
        fitted.fit(X[train], y[train])
        expected.append(func(fitted.transform(X[test]), y[test], **kwargs))
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-12)


def test_scorer_in_grid_search(digits):
    X, y = digits
    cv = _class_disjoint_cv(y)
    search = GridSearchCV(PCA(svd_solver="covariance_eigh"), {"n_components": [2, 16]},
                          scoring={"r1": recall_at_k_scorer(1), "map": map_at_r_scorer()},
                          refit="r1", cv=cv, error_score="raise").fit(X, y)
    assert search.best_params_ == {"n_components": 16}  # 2 dims lose most of the digits
    manual = np.mean([
        recall_at_k(PCA(16, svd_solver="covariance_eigh").fit(X[tr]).transform(X[te]), y[te])
        for tr, te in cv])
    assert search.best_score_ == pytest.approx(manual, abs=1e-12)
    assert np.all(np.isfinite(search.cv_results_["mean_test_map"]))


def test_scorer_rejects_non_transformers(digits):
    X, y = digits
    classifier = make_pipeline(StandardScaler(), LogisticRegression(max_iter=50))
    classifier.fit(X, y)
    for scorer in (recall_at_k_scorer(), map_at_r_scorer(), nmi_scorer(),
                   clustering_f1_scorer()):
        with pytest.raises(NotATransformerError, match="transform"):
            scorer(classifier, X, y)
    assert issubclass(NotATransformerError, ValueError)
    with pytest.raises(ValueError, match="labels"):
        recall_at_k_scorer()(PCA(2, svd_solver="covariance_eigh").fit(X), X, None)


def test_scorer_pickles_and_repr():
    scorer = recall_at_k_scorer(k=4, metric="cosine")
    clone = pickle.loads(pickle.dumps(scorer))
    X, y = _blobs(30, 4, 3, seed=21)
    pca = PCA(3, svd_solver="covariance_eigh").fit(X)
    assert clone(pca, X, y) == scorer(pca, X, y) == recall_at_k(pca.transform(X), y, k=4,
                                                                  metric="cosine")
    assert "k=4" in repr(scorer) and "cosine" in repr(scorer)


# ----------------------------------------------------------------------------------
# GPU
# ----------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    X, y = _blobs(3000, 16, 30, seed=22)
    cpu = retrieval_scores(X, y, k=[1, 4], device="cpu")
    gpu = retrieval_scores(X, y, k=[1, 4], device="cuda")
    assert gpu["recall_at_k"] == pytest.approx(cpu["recall_at_k"], abs=2e-3)
    assert gpu["map_at_r"] == pytest.approx(cpu["map_at_r"], abs=2e-3)


def test_numbers_and_strings_are_not_one_label_across_queries_and_references():
    rng = np.random.RandomState(0)
    Xq, Xr = rng.randn(20, 3), rng.randn(30, 3)
    yq, yr = rng.randint(0, 3, 20), rng.randint(0, 3, 30)
    with pytest.raises(ValueError, match="mix label types"):  # 1 and "1" were one label
        recall_at_k(Xq, yq, X_ref=Xr, y_ref=yr.astype(str))
    with pytest.raises(ValueError, match="mix label types"):
        knn_accuracy(Xq, yq, Xr, yr.astype(str))
    assert recall_at_k(Xq, yq, X_ref=Xr, y_ref=yr) == recall_at_k(
        Xq, yq.astype(float), X_ref=Xr, y_ref=yr)


def test_a_column_of_labels_is_flattened_with_scikit_learns_warning():
    from sklearn.exceptions import DataConversionWarning
    rng = np.random.RandomState(0)
    X, y = rng.randn(20, 3), rng.randint(0, 3, 20)
    with pytest.warns(DataConversionWarning) as caught:  # was flattened silently
        column = recall_at_k(X, y[:, None])
    assert caught[0].filename == __file__  # the user's line (was skdml's _validation.py)
    assert column == recall_at_k(X, y)


@pytest.mark.parametrize("score", [recall_at_k, map_at_r, nmi_score])
def test_labels_mixing_numbers_and_strings_are_refused_clearly(score):
    # type_of_target let them through as "multiclass", then np.unique raised numpy's
    # "'<' not supported between instances of 'int' and 'str'"
    X = np.random.RandomState(0).randn(12, 2)
    with pytest.raises(ValueError, match="mixes label types"):
        score(X, np.array(["a", 1, "b"] * 4, dtype=object))


def test_labels_that_numpy_would_join_as_float_stay_apart():
    # int64 labels joined with uint64 (or float64) ones became float64, where 2**62 and
    # 2**62 + 1 are one label: each query was scored against its own class's references
    base = 2**62
    X = np.array([[0.0], [1.0], [10.0], [11.0], [20.0], [21.0]])
    y_ref = np.array([base, base, base + 1, base + 1, 7, 7], dtype=np.int64)
    Xq, yq = np.array([[0.1], [10.1]]), np.array([base + 1, base], dtype=np.int64)
    unsigned = y_ref.astype(np.uint64)  # the same labels: each query meets the other class
    assert knn_accuracy(Xq, yq, X, unsigned, k=1)[0] == 0.0
    assert recall_at_k(Xq, yq, X_ref=X, y_ref=unsigned, k=1) == 0.0
    assert map_at_r(Xq, yq, X_ref=X, y_ref=unsigned) == 0.0
    # as float64, 2**62 + 1 becomes 2**62: query 2**62 + 1 has no reference of its label
    # (a miss for k-NN, left out of Recall@K), query 2**62 meets its own
    floats = y_ref.astype(np.float64)
    assert knn_accuracy(Xq, yq, X, floats, k=1)[0] == 0.5
    assert recall_at_k(Xq, yq, X_ref=X, y_ref=floats, k=1) == 1.0
    # ordinary mixes still join: 1 and 1.0 are one label
    assert knn_accuracy(Xq, np.array([1, 0]), X, np.array([0.0, 0, 1, 1, 2, 2]), k=1)[0] == 0.0


def test_a_span_beyond_the_float64_range_ranks_exactly_and_returns():
    # every value finite, max - min above 1.8e308: the frame overflowed and the search
    # looped forever; the order is that of the data divided by a power of two
    from skdml.metrics import nearest_neighbors

    X = np.array([[-1e308], [-0.9e308], [-0.8e308], [1e308]])
    np.testing.assert_array_equal(nearest_neighbors(X, 1), [[1], [0], [1], [2]])
    rng = np.random.RandomState(0)
    Z = rng.uniform(-1, 1, (40, 3))
    y = rng.randint(0, 3, 40)
    assert retrieval_scores(Z * 1.7e308, y, k=(1, 3)) == retrieval_scores(Z, y, k=(1, 3))


def test_fewer_distinct_points_than_classes_is_said_plainly():
    from sklearn.exceptions import ConvergenceWarning

    X = np.repeat([[0.0], [1.0]], 5, axis=0)
    y = np.arange(10) % 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clustering_scores(X, y, random_state=0)
    assert not [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert any("found 2 clusters for 3 classes" in str(w.message) for w in caught)


def test_huge_values_on_a_power_of_two_grid_are_searched():
    # math.ldexp(1, 23 + g) overflowed for a grid step g >= 1001
    from skdml.metrics import nearest_neighbors

    np.testing.assert_array_equal(
        nearest_neighbors(np.array([[2.0**1022], [-(2.0**1022)], [0.0]]), 1), [[2], [2], [0]])
    np.testing.assert_array_equal(
        nearest_neighbors(np.array([[0.0], [2.0**1001], [2.0**1002]]), 1), [[1], [0], [1]])


def test_map_at_r_and_r_precision_do_not_depend_on_the_order_of_the_rows():
    # the per-query values were exact, but their mean was a pairwise sum in query order:
    # permuting queries and references together moved the last bit (2 of 20 permutations)
    rng = np.random.RandomState(0)
    X, y = rng.randn(300, 5), rng.randint(0, 6, 300)
    want = retrieval_scores(X, y, k=1)
    for seed in range(20):
        p = np.random.RandomState(seed).permutation(300)
        got = retrieval_scores(X[p], y[p], k=1)
        assert got["map_at_r"] == want["map_at_r"]
        assert got["r_precision"] == want["r_precision"]


def test_scorers_pass_their_options_on():
    # map_at_r_scorer(metric=...) and clustering_f1_scorer(n_init=...) score with those
    # options: the scorer equals the score function called directly with them (data where the
    # option matters).
    from sklearn.preprocessing import FunctionTransformer

    from skdml.metrics import (clustering_f1_score, clustering_f1_scorer, map_at_r,
                               map_at_r_scorer)

    ident = FunctionTransformer().fit(np.zeros((1, 2)))
    rng = np.random.RandomState(0)
    # cosine and Euclidean disagree: classes are directions, norms vary widely
    y = np.repeat(np.arange(3), 10)
    angles = y * 2.0 + 0.3 * rng.randn(30)
    Z = np.c_[np.cos(angles), np.sin(angles)] * rng.uniform(0.1, 10, 30)[:, None]
    assert map_at_r(Z, y, metric="cosine") != map_at_r(Z, y)
    assert map_at_r_scorer(metric="cosine")(ident, Z, y) == map_at_r(Z, y, metric="cosine")

    # k-means with 1 and with 20 initialisations reach different partitions here
    W = rng.randn(60, 2)
    yw = rng.randint(0, 6, 60)
    seed = next(s for s in range(50) if clustering_f1_score(W, yw, random_state=s, n_init=1)
                != clustering_f1_score(W, yw, random_state=s, n_init=20))
    assert clustering_f1_scorer(random_state=seed, n_init=20)(ident, W, yw) == \
        clustering_f1_score(W, yw, random_state=seed, n_init=20)


def test_y_ref_without_x_ref_is_refused():
    # A y_ref without X_ref is refused (prepare_retrieval: 'X_ref and y_ref must be given
    # together'), not silently ignored (only the X_ref-without-y_ref direction is tested).
    from skdml.metrics import map_at_r, recall_at_k

    X = np.random.RandomState(0).rand(8, 2)
    y = np.repeat([0, 1], 4)
    with pytest.raises(ValueError, match="given together"):
        recall_at_k(X, y, k=1, y_ref=y)
    with pytest.raises(ValueError, match="given together"):
        map_at_r(X, y, y_ref=y[::-1])


def test_integer_data_beyond_float32s_exact_range_is_certified():
    # Integer data whose float32 search values exceed 2**24 (frame norms of several
    # thousands): the frame is not exact, and nearest_neighbors must still equal a float64
    # brute force (ties to the lower index). The suite has no integer-grid case with reach**2
    # between 2**24 and 2**27.
    from skdml.metrics import nearest_neighbors

    rng = np.random.RandomState(0)
    near = 1900 + rng.randint(-20, 21, size=(600, 2))        # dense around the queries
    bulk = -2000 + rng.randint(-20, 21, size=(1200, 2))       # the median, far away
    R = np.vstack([near, bulk]).astype(np.float64)
    X = (1900 + rng.randint(-20, 21, size=(50, 2))).astype(np.float64)
    k = 40
    got = nearest_neighbors(X, k, X_ref=R)
    D = ((X[:, None, :] - R[None, :, :]) ** 2).sum(-1)
    want = np.argsort(D, axis=1, kind="stable")[:, :k]       # ties: the lower index first
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"{bad.size} of {len(X)} queries differ from the float64 brute force"


def test_a_near_tie_ending_exactly_at_k_is_settled_in_float64():
    # knn_accuracy: a float32 near-tie of two references of different labels at positions k-1
    # and k (the segment ends exactly at k) is settled in float64. Brute force: the nearer is
    # ref 1 (label 1).
    from skdml.metrics import knn_accuracy

    R = np.array([[1 + 1e-9], [1 - 1e-9], [100.0], [100.0], [100.0], [100.0], [100.0]])
    y_ref = np.array([0, 1, 2, 2, 2, 2, 2])
    Q = np.array([[0.0]])
    d = np.abs(R[:, 0] - Q[0, 0])
    assert d[1] < d[0]                      # float64: ref 1 is the nearest
    assert knn_accuracy(Q, [1], R, y_ref, k=1) == [1.0]


def _bf_cosine_order(q, R):
    """(2 - 2 cos as ||u_q - u_r||^2 of float64 unit rows, summed over the d coordinates; 2
    for a zero row), then index."""
    def unit(A):
        A = np.ldexp(A, -np.frexp(np.max(np.abs(A), axis=1))[1][:, None])
        n = np.sqrt(np.sum(A * A, axis=1))
        n[n == 0.0] = 1.0
        return A / n[:, None]
    U, u = unit(R), unit(q[None, :])[0]
    d = np.sum((U - u) ** 2, axis=1)
    d[~np.any(R != 0, axis=1)] = 2.0
    return np.argsort(d, kind="stable")


def test_cosine_with_a_zero_row_sums_the_data_coordinates_only():
    # d = 15: numpy's pairwise sum of 16 terms (the lifted coordinate of the zero-row
    # convention included) groups them otherwise than a sum of 15, and moves the last bit of
    # a near-tie. Refs 0 and 1 are the same row permuted, at (near-)equal cosine from the
    # query; the zero row in the gallery makes the engine lift.
    rng = np.random.RandomState(0)
    d = 15
    q = np.ones(d)
    for _ in range(3):
        r1 = rng.randn(d)
        r2 = r1[rng.permutation(d)]
    R = np.vstack([r1, r2, np.zeros(d)])
    want = _bf_cosine_order(q, R)
    got = nearest_neighbors(q[None, :], 3, X_ref=R, metric="cosine")
    assert np.array_equal(got[0], want)


def test_an_integer_grid_past_float32s_exact_reach_is_not_taken_as_exact():
    # Integer data whose frame norms reach 8000 (reach**2 = 6.4e7, between 2**24 and 2**26):
    # the stored squared norms 64000001 and 64000000 round to the same float32, so a frame
    # wrongly declared exact would order refs 0 and 1 by index. Brute force: 1 before 0.
    R = np.array([[8000.0, 1.0], [8000.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    Q = np.array([[0.0, 0.0]])
    d = ((R - Q) ** 2).sum(axis=1)
    want = np.argsort(d, kind="stable")[None, :]
    assert want.tolist() == [[2, 3, 4, 1, 0]]
    assert np.array_equal(nearest_neighbors(Q, 5, X_ref=R), want)


def test_an_exact_frame_is_centred_on_the_grid():
    # The references' median is 0.5 in x, off the integer grid: the exact float32 frame
    # must centre on a grid point, else its squared norms (15996001.25, 15996000.25) are
    # not float32 numbers and refs 0 and 1 come out tied (then by index). Brute force: 1
    # before 0.
    R = np.array([[4000.0, 1.0], [4000.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0],
                  [1.0, 0.0]])
    Q = np.array([[0.0, 0.0]])
    d = ((R - Q) ** 2).sum(axis=1)
    want = np.argsort(d, kind="stable")[None, :]
    assert want.tolist() == [[2, 3, 4, 5, 1, 0]]
    assert np.array_equal(nearest_neighbors(Q, 6, X_ref=R), want)


def test_clustering_of_values_at_the_edge_of_float64_is_scale_free():
    # 2**1023 is finite, but t - median = t - (-t) = 2**1024 is not: the float64 centring
    # must halve the data first for |x| >= 2**1022 (at exactly 2**1023 too), or k-means
    # sees an infinite value and raises on finite input.
    t = 2.0 ** 1023
    X = np.array([-t, -t, -t, -t, t, t, 0.75 * t])[:, None]  # median -t
    y = np.array([0, 0, 0, 0, 1, 1, 1])
    assert clustering_scores(X, y, random_state=0) == clustering_scores(X / t, y, random_state=0)


@pytest.mark.parametrize("wide", [False, True])
def test_a_grid_frame_only_holds_integers_float32_represents(monkeypatch, wide):
    # A grid frame is built in float32 and widened from it, so its integers must stay
    # below 2**23 (exact). Here every sampled row (0, 2, 4, ...) is a multiple of 4 and
    # the span is just under 2**25: a grid of 4 would pass. Unsampled rows 1 and 3 are
    # odd, at t - 3 either side of the query t = 2**24 (an exact tie, row 1 first): the
    # grid is 1 and the span too wide for it; taken anyway, 2 t - 3 rounds to 2 t - 4 in
    # float32, and the float64 frame's tight bounds certify row 3 before row 1.
    monkeypatch.setattr(_neighbors, "_WIDE_DEPTH", 0)
    monkeypatch.setattr(_neighbors, "_wide_pays", lambda *args: wide)
    t = 2.0 ** 24
    R = np.zeros((512, 1))
    R[2] = 4.0
    R[1], R[3] = 3.0, 2 * t - 3
    Q = np.array([[t]])
    d = ((R - Q) ** 2).sum(axis=1)
    want = np.argsort(d, kind="stable")
    assert want[:3].tolist() == [2, 1, 3]
    for k in (1, 2, 5):
        assert nearest_neighbors(Q, k, X_ref=R).tolist() == [want[:k].tolist()]
    # the same on a sample of every row: query 2**24 + 1 (float32: 2**24), references
    # 2**24 - 3 away either side (a tie: row 0 first), a span of 2**25 - 1
    q, dl = t + 1, t - 3
    R = np.array([q + dl, q - dl, 0.0, 0.0, 0.0, 1.0, -1.0])[:, None]
    d = ((R - q) ** 2).sum(axis=1)
    want = np.argsort(d, kind="stable")
    assert want[:2].tolist() == [0, 1]
    for k in (1, 2, 7):
        assert nearest_neighbors(np.array([[q]]), k, X_ref=R).tolist() == [want[:k].tolist()]


@pytest.mark.parametrize("k", [4, 5])
def test_float64_frame_rounding_slack_is_a_full_half_ulp(monkeypatch, k):
    # Float64 frame on the CPU: candidates are listed by the float32 rounding of their
    # float64 search values. References 0 and 1 (q -+ dd) tie exactly in the brute force,
    # but their float64 values straddle a float32 midpoint: reference 1 rounds one float32
    # step lower. Every listed value lies in one binade, so a rounding slack of half an
    # ulp (2**-24 of the row's largest magnitude) on each side adds up to at least that
    # step and the pair goes to the float64 pass (0 first); a quarter ulp would certify
    # the step and list 1 before 0.
    monkeypatch.setattr(_neighbors, "_WIDE_DEPTH", 0)
    monkeypatch.setattr(_neighbors, "_wide_pays", lambda *args: True)
    q, dd, n_near = 0.19057083129882812, 1.3389631042898413, 6
    near = q + np.linspace(1.005, 1.03, n_near) * dd * np.where(np.arange(n_near) % 2, 1, -1)
    far = np.full(n_near + 2, 40.0) * np.where(np.arange(n_near + 2) % 2, 1, -1)
    R = np.concatenate([[q - dd, q + dd, 0.0], near, far])[:, None]  # median 0: the centre
    Q = np.array([[q]])
    d = ((R - Q) ** 2).sum(axis=1)
    assert d[0] == d[1]  # an exact tie: the lower index first
    want = np.argsort(d, kind="stable")[:k]
    assert want[:3].tolist() == [2, 0, 1]
    assert nearest_neighbors(Q, k, X_ref=R).tolist() == [want.tolist()]


@pytest.mark.parametrize("k", [2, 3])
def test_float64_frame_rounding_slack_covers_the_row_s_largest_magnitude(monkeypatch, k):
    # Float64 frame on the CPU: candidates are listed by the float32 rounding of their
    # float64 search values ||z_r||^2 - 2 <z_q, z_r>, negative here (the query sits at
    # 1.5, the frame's centre at the median 0). References 0 and 1 (1.5 -+ dd) tie exactly
    # in the brute force, but their float64 values straddle a float32 midpoint near -2.1:
    # reference 1 rounds one float32 step lower. Only a rounding slack of half an ulp of the
    # row's LARGEST magnitude (its first value, in [2, 4); the last listed one is below 2)
    # keeps that one-ulp gap uncertified and sends the pair to the float64 pass: 0 first.
    monkeypatch.setattr(_neighbors, "_WIDE_DEPTH", 0)
    monkeypatch.setattr(_neighbors, "_wide_pays", lambda *args: True)
    q, dd = 1.5, 0.4045802795473006
    R = np.concatenate([[q - dd, q + dd, 0.0], q + np.array([-0.6, 0.62, -0.65, 0.7]),
                        np.full(6, -40.0)])[:, None]
    Q = np.array([[q]])
    d = ((R - Q) ** 2).sum(axis=1)
    assert d[0] == d[1]  # an exact tie: the lower index first
    want = np.argsort(d, kind="stable")[:k]
    assert want[:2].tolist() == [0, 1]
    assert nearest_neighbors(Q, k, X_ref=R).tolist() == [want.tolist()]


def test_overlapping_searches_keep_full_float32_until_the_last_leaves():
    # thread-safety audit (22): each search saved and restored torch's process-wide matmul
    # precision: the first to leave put the caller's "high" back under the other
    import threading

    from skdml.metrics._exact import ieee_float32

    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with ieee_float32():
            a_in.set()
            b_in.wait(30)
        a_out.set()

    def second():
        a_in.wait(30)
        with ieee_float32():
            b_in.set()
            a_out.wait(30)
            seen["after the first left"] = torch.get_float32_matmul_precision()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        final = torch.get_float32_matmul_precision()
    finally:
        torch.set_float32_matmul_precision(previous)
    assert seen == {"after the first left": "highest"} and final == "high"


def test_a_bool_inside_a_list_of_k_is_refused():
    # k=True is caught by validate_params; inside a list only check_k sees it (True is not 1)
    X = np.array([[0.0], [0.1], [1.0], [1.2]])
    y = np.array([0, 0, 1, 1])
    for k in ([True], [1, False], (2, True)):
        with pytest.raises(ValueError, match="positive int"):
            recall_at_k(X, y, k=k)
        with pytest.raises(ValueError, match="positive int"):
            retrieval_scores(X, y, k=k)


def test_clustering_f1_all_singletons_raises_value_error():
    # every class and every cluster a single sample: pairwise F1 is 0/0, documented as ValueError
    # (hypothesis in test_table_scores_match_references reaches this branch only by chance)
    table = _clustering._contingency(np.array([0, 1, 2]), np.array([2, 0, 1]))
    with pytest.raises(ValueError, match="undefined"):
        _clustering._pair_f1_from_table(table)
    X = np.array([[0.0], [5.0], [10.0]])
    with pytest.raises(ValueError, match="undefined"):
        clustering_f1_score(X, [0, 1, 2], random_state=0)


def test_greedy_kmeans_path_keeps_the_lowest_inertia_of_n_init(monkeypatch):
    # beyond SKLEARN_SEEDING_MAX_CLUSTERS the n_init loop is skdml's own: it must keep the best run
    runs = []

    class Recording(KMeans):
        def fit(self, X, y=None, sample_weight=None):
            super().fit(X, y, sample_weight=sample_weight)
            runs.append((self.inertia_, self.labels_.copy()))
            return self

    monkeypatch.setattr(_clustering, "KMeans", Recording)
    Z = np.random.RandomState(0).randn(230, 3)
    k = _clustering.SKLEARN_SEEDING_MAX_CLUSTERS + 1
    labels = _clustering._kmeans(Z, k, 0, 4)
    inertias = [inertia for inertia, _ in runs]
    assert len(runs) == 4 and len(set(inertias)) > 1  # the runs differ: the choice matters
    np.testing.assert_array_equal(labels, runs[int(np.argmin(inertias))][1])


def test_integer_tensor_labels_above_2_53_stay_apart():
    # torch int64 labels are ids: as float64, 2**53 and 2**53 + 1 would become one class
    B = 2**53
    X = np.array([[0.0], [0.1], [1.0], [1.1]])
    y = np.array([B, B + 1, B, B + 1])
    assert recall_at_k(X, torch.tensor(y), k=1) == recall_at_k(X, y, k=1) == 0.0
    assert map_at_r(X, torch.tensor(y)) == map_at_r(X, y)


def test_a_gallery_of_another_width_is_refused_either_way():
    X = np.array([[0.0, 0.0], [0.1, 0.0], [1.0, 0.0], [1.1, 0.0]])
    y = np.array([0, 0, 1, 1])
    for Q, R in ((X[:, :1], X), (X, X[:, :1])):  # queries narrower, then wider, than the gallery
        with pytest.raises(ValueError, match="same embedding space"):
            recall_at_k(Q, y, k=1, X_ref=R, y_ref=y)
        with pytest.raises(ValueError, match="same embedding space"):
            map_at_r(Q, y, X_ref=R, y_ref=y)
