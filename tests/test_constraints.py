"""skdml.constraints.Constraints: pairs, triplets and chunks drawn from labels."""

import warnings

import numpy as np
import pytest

from skdml.constraints import Constraints


def _labels(seed=0, n=60, k=4):
    return np.random.RandomState(seed).randint(0, k, n)


def test_pairs_are_valid_distinct_and_reproducible():
    y = _labels()
    a, b, c, d = Constraints(y).positive_negative_pairs(200, random_state=0)
    assert len(a) == len(c) == 200
    assert np.all(y[a] == y[b]) and np.all(a != b) and np.all(y[c] != y[d])
    assert len(set(zip(a, b))) == 200 and len(set(zip(c, d))) == 200
    again = Constraints(y).positive_negative_pairs(200, random_state=0)
    for u, v in zip((a, b, c, d), again):
        np.testing.assert_array_equal(u, v)


def test_pairs_cover_every_possible_pair_when_asked_for_more():
    y = np.array([0, 0, 1, 1, 1])
    with pytest.warns(UserWarning, match="Only 8 distinct similar pairs exist") as caught:
        a, b, c, d = Constraints(y).positive_negative_pairs(50, random_state=0)
    assert caught[0].filename == __file__  # the user's line, not skdml's
    assert set(zip(a, b)) == {(i, j) for i in range(5) for j in range(5)
                              if i != j and y[i] == y[j]}
    assert len(set(zip(c, d))) == 12
    with pytest.warns(UserWarning):
        a, _, c, _ = Constraints(y).positive_negative_pairs(50, same_length=True, random_state=0)
    assert len(a) == len(c) == 8


def test_every_existing_pair_is_drawn_when_exactly_that_many_are_asked_for():
    # 10 rounds of rejection sampling stopped at 166 of the 180 similar pairs, with a
    # warning that only 166 "could be drawn"
    y = np.repeat([0, 1], 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pairs, labels = Constraints(y).labeled_pairs(180, random_state=0)
    similar = {tuple(p) for p in pairs[labels == 1]}
    assert len(similar) == 180 and all(y[a] == y[b] and a != b for a, b in similar)
    assert len({tuple(p) for p in pairs[labels == -1]}) == 180


def test_unknown_labels_are_never_drawn_and_labeled_pairs_match():
    y = np.array([0, 0, 0, -1, 1, 1, -1, 1])
    pairs, labels = Constraints(y).labeled_pairs(5, random_state=1)
    assert not np.isin(pairs, [3, 6]).any()
    np.testing.assert_array_equal(labels == 1, y[pairs[:, 0]] == y[pairs[:, 1]])
    with pytest.raises(ValueError, match="No labelled sample"):
        Constraints(np.full(4, -1)).labeled_pairs(2)
    with pytest.raises(ValueError, match="positive integer"):
        Constraints(y).labeled_pairs(0)


def test_chunks_are_disjoint_single_class_and_reproducible():
    y = _labels(n=80)
    chunks = Constraints(y).chunks(n_chunks=8, chunk_size=3, random_state=0)
    ids = np.unique(chunks[chunks >= 0])
    np.testing.assert_array_equal(ids, np.arange(8))
    for i in ids:
        assert np.sum(chunks == i) == 3 and len(np.unique(y[chunks == i])) == 1
    np.testing.assert_array_equal(chunks, Constraints(y).chunks(8, 3, random_state=0))
    with pytest.raises(ValueError, match="at most"):
        Constraints(np.array([0, 0, 1])).chunks(n_chunks=2, chunk_size=2)


def _metric_learn_chunks(y, n_chunks, chunk_size, seed):
    """metric-learn 0.7.0's rule, replayed on a small problem (indices below 32, classes of 5
    or more), where its Python set of a class's sample indices iterates in increasing order:
    a class by ``randint(0, n_left - 1)`` (the class listed last only when alone), then
    ``choice(its samples left, chunk_size, replace=False)``; a class picked with fewer than
    ``chunk_size`` samples left is struck off."""
    rng = np.random.RandomState(seed)
    left = [list(np.flatnonzero(y == c)) for c in np.unique(y)]
    chunks = np.full(len(y), -1)
    drawn = 0
    while drawn < n_chunks:
        c = 0 if len(left) == 1 else rng.randint(0, len(left) - 1)
        if len(left[c]) < chunk_size:
            del left[c]
            continue
        members = rng.choice(left[c], chunk_size, replace=False)
        left[c] = [i for i in left[c] if i not in members]
        chunks[members] = drawn
        drawn += 1
    return chunks


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n_chunks, chunk_size", [(4, 3), (9, 3), (12, 2)])
def test_chunks_follow_metric_learn_draw_for_draw(seed, n_chunks, chunk_size):
    y = np.random.RandomState(seed).permutation(np.arange(30) % 3)
    np.testing.assert_array_equal(Constraints(y).chunks(n_chunks, chunk_size, random_state=seed),
                                  _metric_learn_chunks(y, n_chunks, chunk_size, seed))


def test_chunks_leave_the_last_class_out_until_it_is_alone():
    y = np.repeat(np.arange(4), 9)  # 12 possible chunks of 3
    for seed in range(5):
        chunks = Constraints(y).chunks(n_chunks=9, chunk_size=3, random_state=seed)
        assert not np.any(chunks[y == 3] >= 0)  # as metric-learn: classes 0-2 are used up first
        assert np.all(chunks[y < 3] >= 0)
    chunks = Constraints(y).chunks(n_chunks=12, chunk_size=3, random_state=0)
    assert np.all(chunks >= 0)


def test_knn_triplets_match_a_brute_force_neighbour_search():
    rng = np.random.RandomState(0)
    X, y = rng.randn(30, 3), _labels(n=30, k=3)
    triplets = Constraints(y).generate_knntriplets(X, k_genuine=2, k_impostor=3)
    assert len(triplets) == 30 * 2 * 3
    D = np.linalg.norm(X[:, None] - X[None], axis=2)
    for i in range(30):
        same = np.flatnonzero((y == y[i]) & (np.arange(30) != i))
        other = np.flatnonzero(y != y[i])
        mine = triplets[triplets[:, 0] == i]
        assert set(mine[:, 1]) == set(same[np.argsort(D[i, same])[:2]])
        assert set(mine[:, 2]) == set(other[np.argsort(D[i, other])[:3]])
        assert len({(p, q) for _, p, q in mine}) == 6


def test_knn_triplets_warn_for_small_classes():
    X, y = np.arange(10.0)[:, None], np.array([0, 0, 1, 1, 1, 1, 1, 1, 1, 1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        triplets = Constraints(y).generate_knntriplets(X, k_genuine=3, k_impostor=1)
    assert any("gives 1 genuine" in str(w.message) for w in caught)
    assert len(triplets) == 2 * 1 * 1 + 8 * 3 * 1


def test_nan_labels_are_refused_unless_they_mark_the_unknown_samples():
    y = np.array([0.0, 0.0, np.nan, 1.0, 1.0, np.nan])
    with pytest.raises(ValueError, match="contains NaN"):  # NaNs were one class together
        Constraints(y)
    pairs, labels = Constraints(y, unknown_label=np.nan).labeled_pairs(4, random_state=0)
    assert not np.isin(pairs, [2, 5]).any() and set(labels.tolist()) == {-1, 1}
    chunks = Constraints(y, unknown_label=np.nan).chunks(2, 2, random_state=0)
    np.testing.assert_array_equal(chunks[[2, 5]], [-1, -1])
    with pytest.raises(ValueError, match="missing value .*unknown_label=None says every"):
        Constraints(np.array(["a", "b", None], dtype=object), unknown_label=None)


def test_a_huge_request_costs_what_the_existing_pairs_cost():
    # 4 similar and 8 dissimilar ordered pairs exist: 10**12 asked must not allocate 10**12
    c = Constraints([0, 0, 1, 1])
    with pytest.warns(UserWarning, match="Only 4 distinct similar pairs exist"):
        pairs, y = c.labeled_pairs(10**12, random_state=0)
    assert pairs.shape == (12, 2) and (y == 1).sum() == 4


def test_warnings_name_a_class_by_its_plain_value():
    X = np.arange(8.0)[:, None]
    with pytest.warns(UserWarning, match=r"Class 0 gives 1 genuine") as caught:
        Constraints(np.array([0, 0, 1, 1, 1, 1, 1, 1])).generate_knntriplets(X, 2, 1)
    assert "np.int64" not in str(caught[0].message)


def test_knn_triplets_use_every_impostor_when_k_impostor_is_all_of_them():
    # generate_knntriplets with k_impostor equal to the other classes' size: every impostor is
    # used, no warning (brute force: all (a, p, n) with p the same-class partner and n any
    # other-class sample).

    X = np.array([[0.0], [1.0], [10.0], [12.0]])
    labels = np.array([0, 0, 1, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = Constraints(labels).generate_knntriplets(X, k_genuine=1, k_impostor=2)
    brute = {(a, p, n) for a in range(4) for p in range(4) for n in range(4)
             if a != p and labels[a] == labels[p] and labels[n] != labels[a]}
    assert {tuple(r) for r in t.tolist()} == brute and len(t) == len(brute), t


def test_rejection_sampling_rounds_reach_the_request_without_the_enumeration(monkeypatch):
    # beyond MAX_ENUMERATED_PAIRS only the rejection rounds draw: 500 of the 900 ordered
    # similar pairs take several rounds (one round of 500 draws finds about 390 distinct)
    import skdml.constraints as constraints_module

    monkeypatch.setattr(constraints_module, "MAX_ENUMERATED_PAIRS", 0)
    y = np.repeat(np.arange(10), 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a, b, c, d = Constraints(y).positive_negative_pairs(500, random_state=0)
    assert len(a) == 500 and len(set(zip(a.tolist(), b.tolist()))) == 500
    assert np.all(y[a] == y[b]) and np.all(a != b)


def test_two_dimensional_labels_are_refused_by_their_own_name():
    with pytest.raises(ValueError, match=r"partial_labels should be a 1d array.*\(2, 2\)"):
        Constraints(np.array([[0, 0], [1, 1]]))
