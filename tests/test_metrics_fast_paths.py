"""The fast paths of the scorers (issue 37) against brute force.

Short neighbour lists select by a threshold from column-group minima; CPU blocks are
ranked side by side in worker threads; deep lists over dense values may be ranked in a
float64 frame; clustering with many classes seeds k-means with skdml's greedy
k-means++. Each must give what the plain computation gives.
"""

import warnings

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score

from skdml.metrics import (
    _clustering,
    _exact,
    _neighbors,
    _select,
    clustering_scores,
    map_at_r,
    nearest_neighbors,
    retrieval_scores,
)
from skdml.metrics._select import smallest


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
    vals, idx = np.empty((50, 12), dtype=np.float32), np.empty((50, 12), dtype=np.int64)
    _select._sorted_candidates(part, 12, False, vals, idx)
    expected = np.array([np.lexsort((np.arange(4000), row))[:12] for row in part])
    np.testing.assert_array_equal(idx, expected)
    np.testing.assert_array_equal(vals, np.take_along_axis(part, expected, axis=1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_long_lists_from_a_sampled_threshold_are_sorted_by_rounding_then_column(dtype):
    # L // 64 >= 2: a threshold from every stride-th column, one sort of (value, index)
    # keys per row; rows after the first carry their offset in the keys until the end
    rng = np.random.RandomState(3)
    part = rng.randn(30, 3000).astype(dtype) - 0.5  # negative and positive values
    part[4, ::7] = 0.0
    part[4, 3::7] = -0.0  # -0.0 equals +0.0: ranked among them by column
    part[9, :600] = part[9, 0]  # a run of ties longer than the list
    vals, idx = np.empty((30, 200), dtype=np.float32), np.empty((30, 200), dtype=np.int64)
    _select._sorted_candidates(part, 200, False, vals, idx)
    rounded = part.astype(np.float32) + np.float32(0.0)
    expected = np.array([np.lexsort((np.arange(3000), row))[:200] for row in rounded])
    np.testing.assert_array_equal(idx, expected)
    np.testing.assert_array_equal(vals, np.take_along_axis(rounded, expected, axis=1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_long_lists_are_exact_whatever_their_values_16_bit_buckets(dtype):
    # long lists are put nearly in order by 16-bit buckets of their values, then sorted
    # exactly: values the buckets cannot spread (infinite, spanning float32's range,
    # subnormal, all in one bucket) change the time, never the order
    rng = np.random.RandomState(4)
    part = rng.rand(24, 3000).astype(dtype)
    part[2, rng.permutation(3000)[:350]] = -np.inf  # listed non-finite: sorted directly
    part[3] = 3.4e38  # listed values -3e38 and 3e38: their float32 spread overflows
    part[3, rng.permutation(3000)[:450]] = np.repeat([-3e38, 3e38], [150, 300])
    part[5] = rng.rand(3000) * 2.0 ** -140  # subnormal spread
    part[6] = 1.0 + rng.randint(0, 3, 3000) * 2.0 ** -23  # three values, many ties
    part[7, ::2] = 0.5  # half the row in one bucket
    rounded = part.astype(np.float32)
    for block in ([2], np.delete(np.arange(24), 2)):  # one non-finite value: its block
        vals = np.empty((len(block), 300), dtype=np.float32)
        idx = np.empty((len(block), 300), dtype=np.int64)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no overflow, no invalid cast
            _select._sorted_candidates(part[block], 300, False, vals, idx)
        expected = np.array([np.lexsort((np.arange(3000), row))[:300] for row in rounded[block]])
        np.testing.assert_array_equal(idx, expected)
        np.testing.assert_array_equal(vals, np.take_along_axis(rounded[block], expected, axis=1))


def test_sixteen_bit_buckets_are_monotone_and_in_range():
    values = np.array([3.0, 1.0, 2.0, 1.0, -1e30, 5.0, 5.0, 7.0], dtype=np.float32)
    counts = np.array([4, 0, 1, 3])
    got = _select._buckets(values, counts)
    np.testing.assert_array_equal(got[:4], [65519, 0, 32759, 0])  # (v - 1) / 2 * 65519
    assert got[4] == 0  # a row of one value: every bucket 0
    np.testing.assert_array_equal(got[5:], [0, 0, 65519])
    assert _select._buckets(np.array([1.0, np.nan]), np.array([2])) is None


def test_blocks_ranked_by_workers_give_the_sequential_result(monkeypatch):
    rng = np.random.RandomState(2)
    X = rng.randn(1500, 5)
    y = rng.randint(0, 6, 1500)
    sequential = retrieval_scores(X, y, k=[1, 4])
    monkeypatch.setattr(_neighbors, "choose_n_threads", lambda flops=None, **kw: 2)
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
    np.testing.assert_array_equal(_select.order_segments(segment, dist, ref),
                                  np.lexsort((ref, dist, segment)))


@pytest.mark.parametrize("L, full", [(12, False), (300, False), (4000, True)])
@pytest.mark.parametrize("many_ties", [False, True])
def test_float64_lists_are_cut_and_ordered_by_float32_rounding(L, full, many_ties):
    # Values 1 + i 1e-12 all round to one float32. A float64 list is sorted by (float32
    # rounding, index), its values those roundings (the certificate adds half an ulp to
    # its slacks), and everything unlisted rounds to float32 at or above the last listed
    # (what _settle's floor assumes), though it may lie below it in float64. Rows with more ties than 4 L below the threshold take the fallback.
    rng = np.random.RandomState(6)
    part = 1.0 + rng.randint(0, 400, (20, 4000)) * 1e-12
    part[:, ::7] += rng.rand(20, 572)  # other float32 roundings
    if many_ties:
        part[2, :] = 1.0
    vals, idx, floor = _select.smallest(torch.from_numpy(part), np.arange(20), L, full)
    rounded = part.astype(np.float32)
    assert vals.dtype == np.float32
    below = 0
    for row in range(20):
        listed = idx[row]
        assert np.unique(listed).size == L
        np.testing.assert_array_equal(listed, listed[np.lexsort((listed, rounded[row, listed]))])
        np.testing.assert_array_equal(vals[row], rounded[row, listed])
        unlisted = np.setdiff1d(np.arange(4000), listed)
        assert np.all(rounded[row, unlisted] >= vals[row, -1])
        assert np.all(part[row, unlisted] >= floor[row])
        below += np.count_nonzero(part[row, unlisted] < part[row, listed].max())
    assert full or below > 0  # the case the floor must cover does occur


@pytest.mark.parametrize("wide", [False, True])
def test_a_float32_tie_across_the_list_end_is_still_ranked_exactly(monkeypatch, wide):
    # A cluster of 400 points 1e-5 apart far from the bulk: from inside it, distances
    # tie in float32 but not in float64, so a float64 list (cut by float32 rounding,
    # L = 154 from a sampled threshold) ends inside a tie, and some unlisted
    # references lie below its last value: the bound must not certify past them.
    rng = np.random.RandomState(10)
    X = np.vstack([rng.randn(600, 2), 3.0 + 1e-5 * rng.randn(400, 2)])
    monkeypatch.setattr(_neighbors, "_WIDE_DEPTH", 0)
    monkeypatch.setattr(_neighbors, "_wide_pays", lambda *args: wide)
    np.testing.assert_array_equal(nearest_neighbors(X, 150), _brute(X, 150))


def _count_float64_pass(monkeypatch):
    seen, frames = [], []
    original_distances, original_init = _exact.Frame.exact_distances, _exact.Frame.__init__

    def counting(self, qi, rj):
        seen.append(qi.size)
        return original_distances(self, qi, rj)

    def recording(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        frames.append(self.wide)

    monkeypatch.setattr(_exact.Frame, "exact_distances", counting)
    monkeypatch.setattr(_exact.Frame, "__init__", recording)
    return seen, frames


def test_the_float64_frame_settles_the_near_ties_of_dense_deep_lists(monkeypatch):
    # Two classes of 1,000 in 3-D, MAP@R reads 1,000 neighbours per query: float32
    # leaves many near-ties to the brute force, the float64 frame few; both
    # give the brute-force score.
    rng = np.random.RandomState(7)
    y = np.repeat([0, 1], 1000)
    X = rng.randn(2000, 3) + 0.5 * y[:, None]
    D = ((X[:, None] - X[None]) ** 2).sum(axis=2)
    np.fill_diagonal(D, np.inf)
    order = np.argsort(D, axis=1, kind="stable")[:, :999]
    rel = y[order] == y[:, None]
    expected = np.mean(np.sum(np.cumsum(rel, axis=1) / np.arange(1, 1000) * rel, axis=1) / 999)
    seen, frames = _count_float64_pass(monkeypatch)
    monkeypatch.setattr(_neighbors, "_wide_pays", lambda *args: False)
    assert map_at_r(X, y) == pytest.approx(expected, abs=1e-12)
    float32_pass = sum(seen)
    seen.clear()
    monkeypatch.setattr(_neighbors, "_wide_pays", lambda *args: True)
    assert map_at_r(X, y) == pytest.approx(expected, abs=1e-12)
    assert frames == [False, False, True]
    # (its lists are float32 roundings: only candidates within an ulp or two still go)
    assert float32_pass > 2000 and sum(seen) < float32_pass / 10


@pytest.mark.parametrize("ratio, wide", [(0.0, True), (1.0, False)])
def test_the_probe_chooses_the_frame_from_the_float64_pass_it_counts(monkeypatch, ratio, wide):
    rng = np.random.RandomState(8)
    y = rng.randint(0, 2, 1500)
    X = rng.randn(1500, 3) + y[:, None]
    expected = map_at_r(X, y)
    seen, frames = _count_float64_pass(monkeypatch)
    monkeypatch.setattr(_neighbors, "_PROBE_MIN_PAIRS", 0)
    monkeypatch.setattr(_neighbors, "_WIDE_RATIO", ratio)
    assert map_at_r(X, y) == expected
    assert frames == ([False, True] if wide else [False])


def test_shallow_or_small_searches_do_not_probe(monkeypatch):
    calls = []
    monkeypatch.setattr(_neighbors, "_wide_pays", lambda *args: calls.append(args) or True)
    rng = np.random.RandomState(9)
    X = rng.randn(300, 4)
    nearest_neighbors(X, 10)  # lists shorter than _WIDE_DEPTH
    assert calls == []
    monkeypatch.undo()
    seen, frames = _count_float64_pass(monkeypatch)
    nearest_neighbors(X, 200)  # deep, but 300 x 300 pairs: below _PROBE_MIN_PAIRS
    assert frames == [False]


class _StubWideFrame:
    """A float64 frame whose computed values are within ``eps`` (relative) of the truth,
    the truth given by ``table``: the certificate's arithmetic, without a real product."""

    exact, wide, zero_queries, exclude_self = False, True, None, False

    def __init__(self, table, eps=2.0 ** -45):
        self.table, self.eps = np.asarray(table, dtype=np.float64), eps
        self.r_norm = np.zeros(self.table.size)

    def estimate(self, vals, qrows):
        return vals.astype(np.float64)

    def reach(self, v_last, qrows):
        return np.zeros_like(v_last)

    def slacks(self, v_first, v_last, qrows, b_max):
        s = self.eps * np.maximum(np.abs(v_first), np.abs(v_last))
        return s, s

    def beyond(self, v_last, qrows):
        return v_last - self.eps * np.abs(v_last)

    def exact_distances(self, qi, rj):
        return self.table[rj]


def test_float32_roundings_of_a_float64_list_are_not_taken_for_separations():
    # Two references straddle a float32 rounding boundary (1 + 2**-24): their float64
    # values differ by 2**-45, within the frame's error, and the truth has them the other
    # way round. Their roundings differ by a whole ulp, 2**-23: a certificate that read
    # the roundings as the values would keep the rounding order, and put the wrong label
    # first. Half an ulp of the row's largest value on each side sends them to the float64
    # pass, which orders them by the truth.
    x = np.array([0.5, 1 + 2.0 ** -24 - 2.0 ** -46, 1 + 2.0 ** -24 + 2.0 ** -46, 3.0, 3.5])
    truth = x.copy()
    truth[[1, 2]] = truth[[2, 1]]
    frame = _StubWideFrame(truth)
    labels = np.array([0, 0, 1, 0, 1])
    vals, idx, floor = _select.smallest(torch.from_numpy(x[None, :]), np.arange(1), 5, True)
    assert vals[0, 2] - vals[0, 1] == np.float32(2.0 ** -23)
    np.testing.assert_array_equal(labels[idx[0]], [0, 0, 1, 0, 1])  # the rounding order
    depth = np.array([4])
    ok, order = _neighbors._settle(vals, idx.copy(), floor, np.arange(1), depth, depth, (),
                                   True, frame, labels, np.array([0]))
    assert ok[0]
    np.testing.assert_array_equal(labels[order[0]], [0, 1, 0, 0, 1])  # the truth's sequence


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("d", [1, 8])  # on a line the triangle inequality is tight
@pytest.mark.parametrize("offset, scale", [(0.0, 1.0), (1e4, 1.0), (0.0, 1e-30), (-3.0, 1e12)])
def test_the_norm_bound_covers_every_reference_up_to_the_last_value(wide, d, offset, scale):
    # Frame.reach replaces a read of the listed references' norms: it must never fall
    # below the largest norm of the references whose search value is at most v_last
    rng = np.random.RandomState(11)
    X = (offset + scale * (rng.randn(3000, d) + 4 * rng.randn(10, d)[rng.randint(0, 10, 3000)]))
    frame = _exact.Frame(X, X, exclude_self=True, metric="euclidean", device=torch.device("cpu"),
                         wide=wide)
    rows = np.arange(0, 3000, 97)
    D = frame.distances(rows, True).numpy()
    v = D + frame.q_sq[rows][:, None]  # frame.estimate: the values the certificate reads
    for depth in (1, 30, 600, 2998):
        v_last = np.sort(v, axis=1)[:, depth - 1]
        bound = frame.reach(v_last, rows)
        covered = np.where(v <= v_last[:, None], frame.r_norm[None, :], 0.0).max(axis=1)
        assert np.all(bound >= covered)
        assert np.all(bound <= frame.r_norm_max)


def test_clustering_scores_hold_the_nonzero_cells_only():
    # the dense (n_classes, n_clusters) table grew with n**2 for classes of a fixed size:
    # 5 samples a class at n = 32,000 took 937 MB (three copies of 312 MB) for 2 MB of codes
    import tracemalloc

    from skdml.metrics import _clustering

    n = 32000
    classes = np.arange(n) // 5
    clusters = np.roll(classes, 1)
    tracemalloc.start()
    table = _clustering._contingency(classes, clusters)
    f1, nmi = _clustering._pair_f1_from_table(table), _clustering._nmi_from_table(table)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 * n * 8  # a few arrays of n int64, not n_classes x n_clusters
    assert 0.0 < f1 < 1.0 and 0.0 < nmi <= 1.0


def test_rows_of_tied_values_settle_at_their_first_list(monkeypatch):
    # rows whose values tie past the list were never certified before the unlisted
    # references (the comparison with the floor was strict, even in an exact frame), so
    # the list grew 4x at a time to a full sort of every row, each step through a
    # selection that is slow on tied rows: 85x the time of ordinary data at n = 4,000
    from skdml.metrics import _neighbors

    lengths = []
    smallest = _neighbors.smallest

    def spy(D, rows, L, full):
        lengths.append(L)
        return smallest(D, rows, L, full)

    monkeypatch.setattr(_neighbors, "smallest", spy)
    n = 300
    X = np.ones((n, 4))  # every row equal: ties broken by index
    got = nearest_neighbors(X, 10)
    want = np.array([[j for j in range(11) if j != i][:10] for i in range(n)])
    np.testing.assert_array_equal(got, want)
    assert set(lengths) == {14}  # the first list (k + 4), never a longer one
    lengths.clear()
    X_ref = np.zeros((50, 3))
    np.testing.assert_array_equal(nearest_neighbors(np.zeros((5, 3)), 7, X_ref=X_ref),
                                  np.tile(np.arange(7), (5, 1)))
    assert set(lengths) == {11}


def test_the_fallback_selection_lists_the_lowest_columns_of_tied_values():
    # np.argpartition listed any of the values equal to the L-th; the keys' partition lists
    # the lowest columns, as the other selection paths do
    from skdml.metrics._select import _sorted_keys

    rng = np.random.RandomState(0)
    part = rng.randint(0, 3, size=(40, 200)).astype(np.float32)  # many ties
    L = 10
    keys = _sorted_keys(part, L, full=False)
    want = np.argsort(part, axis=1, kind="stable")[:, :L]
    np.testing.assert_array_equal(keys & 0xFFFFFFFF, want)


def test_the_fallback_selection_lists_exactly_the_L_smallest_keys():
    # k = 100 of 1621 references: a list of L = 112, selected by the fallback partition of
    # the (float32 value, index) keys. Ranks 99..111 are 13 float32 ties (1 + i 2**-45),
    # the float64-nearest of them at the highest index: listed last, at position L - 1.
    # A partition at L - 2 leaves an arbitrary larger key there (numpy 2.4: a far
    # reference), which then sets the floor of the unlisted ones: the ties look separated
    # from everything unlisted, are re-ranked among themselves without the 13th, and the
    # nearest of them goes missing from the top 100. The exact partition at L - 1 lists
    # it; the 13 ties stay uncertified and the longer list ranks them.
    rng = np.random.RandomState(77)
    n, k, L = 1621, 100, 112
    g = L - k + 1
    vals = np.concatenate([0.001 * (1 + np.arange(k - 1)), 1.0 + np.arange(g) * 2.0 ** -45,
                           2.0 + 3 * rng.rand(n - k + 1 - g)])
    perm = rng.permutation(n)
    top = perm[k - 1:L].max()
    perm[k - 1:L] = np.concatenate([[top], np.sort(perm[k - 1:L])[:-1]])
    R = np.empty(n)
    R[perm] = vals
    want = np.argsort(R, kind="stable")[:k]  # the query is 0, every reference above it
    assert want[k - 1] == top
    assert nearest_neighbors(np.zeros((1, 1)), k, X_ref=R[:, None]).tolist() == [want.tolist()]


def _row():
    # 1000 values; a list of L = 128 samples every 2nd column and takes the 89th smallest
    # sampled value (89) as its threshold: 89 sampled values and 38 others lie at or below
    # it, 127 = L - 1 in all: too few, the row must take the exact fallback selection.
    r = np.empty(1000)
    r[0::2] = 1.0 + np.arange(500)  # sampled columns: 1 .. 500
    odd = np.arange(1, 1000, 2)
    r[odd] = 1000.0 + odd
    r[odd[:38]] = 0.5 + np.arange(38)
    return r


def test_a_threshold_with_one_value_too_few_falls_back_to_the_exact_selection():
    vals, idx, floor = smallest(torch.from_numpy(_row().astype(np.float32)[None, :]),
                                np.array([0]), 128, False)
    assert idx[0].tolist() == np.argsort(_row(), kind="stable")[:128].tolist()
    # the same row through the search: k = 114 lists L = 114 + 114 // 8 = 128
    want = np.argsort(_row(), kind="stable")[:114]
    assert nearest_neighbors(np.zeros((1, 1)), 114, X_ref=_row()[:, None]).tolist() == \
        [want.tolist()]
