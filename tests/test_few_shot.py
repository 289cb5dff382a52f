"""Tests of skdml.metrics.few_shot_accuracy: a brute-force episode loop, seeds, errors."""

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.utils._param_validation import InvalidParameterError

from skdml.metrics import few_shot_accuracy


def _brute_force(X, y, *, n_way, n_shot, n_queries, n_episodes, metric, seed):
    """The protocol of the docstring's Notes, one query at a time, in plain numpy."""
    X = np.asarray(X, dtype=np.float64)
    rng = np.random.RandomState(seed)
    classes = [c for c in np.unique(y) if np.sum(y == c) >= n_shot + n_queries]
    accuracies = []
    for _ in range(n_episodes):
        chosen = rng.choice(len(classes), n_way, replace=False)
        support, queries = [], []
        for position in chosen:
            members = np.flatnonzero(y == classes[position])
            picked = rng.choice(members, n_shot + n_queries, replace=False)
            support.append(picked[:n_shot])
            queries.append(picked[n_shot:])
        if metric == "cosine":
            unit = X / np.linalg.norm(X, axis=1, keepdims=True)
            prototypes = [unit[s].mean(axis=0) for s in support]
        else:
            prototypes = [X[s].mean(axis=0) for s in support]
        correct = 0
        for way, rows in enumerate(queries):
            for i in rows:
                if metric == "cosine":
                    q = X[i] / np.linalg.norm(X[i])
                    scores = [-(q @ p) / np.linalg.norm(p) for p in prototypes]
                else:
                    scores = [np.sum((X[i] - p) ** 2) for p in prototypes]
                correct += int(np.argmin(scores) == way)
        accuracies.append(correct / (n_way * n_queries))
    accuracies = np.array(accuracies)
    return accuracies.mean(), 1.96 * accuracies.std(ddof=1) / math.sqrt(n_episodes)


def _blobs(n_classes=12, per_class=9, d=6, spread=1.5, seed=0):
    rng = np.random.RandomState(seed)
    y = np.repeat(np.arange(n_classes), per_class)
    X = rng.randn(n_classes * per_class, d) + spread * rng.randn(n_classes, d)[y]
    return X, y


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("n_way, n_shot, n_queries", [(5, 1, 3), (4, 3, 5), (12, 2, 7)])
def test_equals_brute_force_episode_loop(metric, n_way, n_shot, n_queries):
    X, y = _blobs()
    expected = _brute_force(X, y, n_way=n_way, n_shot=n_shot, n_queries=n_queries,
                            n_episodes=40, metric=metric, seed=3)
    got = few_shot_accuracy(X, y, n_way=n_way, n_shot=n_shot, n_queries=n_queries,
                            n_episodes=40, metric=metric, random_state=3)
    assert 0.0 < expected[0] < 1.0  # a real test: neither trivially right nor wrong
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)


def test_separated_classes_score_one_and_random_embeddings_chance():
    y = np.repeat(np.arange(8), 10)
    X = np.eye(8)[y] * 100 + np.random.RandomState(0).randn(80, 8)
    assert few_shot_accuracy(X, y, n_way=5, n_shot=1, n_queries=5, n_episodes=30,
                             random_state=0) == (1.0, 0.0)
    noise = np.random.RandomState(1).randn(80, 8)
    accuracy, ci95 = few_shot_accuracy(noise, y, n_way=5, n_shot=1, n_queries=5,
                                       n_episodes=400, random_state=0)
    assert abs(accuracy - 0.2) < 3 * ci95 + 0.01


def test_offsets_and_extreme_scales_give_the_same_accuracy():
    X, y = _blobs()
    expected = few_shot_accuracy(X, y, n_shot=2, n_queries=4, n_episodes=50, random_state=1)
    for Z in (X + 1e8, X * 1e200, X * 1e-200, (X + 1e6) * 1e150):
        assert few_shot_accuracy(Z, y, n_shot=2, n_queries=4, n_episodes=50,
                                 random_state=1) == expected


def test_seed_fixes_the_episodes_and_labels_are_labels():
    X, y = _blobs()
    a = few_shot_accuracy(X, y, n_shot=2, n_queries=4, n_episodes=25, random_state=7)
    assert a == few_shot_accuracy(X, y, n_shot=2, n_queries=4, n_episodes=25, random_state=7)
    # string labels in the same sorted order, and a torch tensor of embeddings
    names = np.array([f"char{c:02d}" for c in y])
    b = few_shot_accuracy(torch.from_numpy(X), names, n_shot=2, n_queries=4, n_episodes=25,
                          random_state=7)
    assert a == b


def test_small_classes_are_left_out_with_a_warning():
    X, y = _blobs(n_classes=10, per_class=6)
    small = np.isin(y, [2, 7])
    keep = ~small | (np.arange(y.size) % 6 < 3)  # classes 2 and 7 keep 3 samples
    with pytest.warns(UserWarning, match="2 of 10 classes hold fewer than") as caught:
        got = few_shot_accuracy(X[keep], y[keep], n_way=4, n_shot=1, n_queries=4,
                                n_episodes=20, random_state=0)
    assert caught[0].filename == __file__  # the user's line
    X8, y8 = X[~small], np.unique(y[~small], return_inverse=True)[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expected = few_shot_accuracy(X8, y8, n_way=4, n_shot=1, n_queries=4, n_episodes=20,
                                     random_state=0)
    assert got == expected


def test_impossible_sizes_raise_clear_errors():
    X, y = _blobs(n_classes=4, per_class=5)
    with pytest.raises(ValueError, match="n_way=5 needs 5 classes .* y has 4 such classes"):
        few_shot_accuracy(X, y, n_way=5, n_shot=1, n_queries=2)
    with pytest.raises(ValueError, match="at least n_shot \\+ n_queries = 6 samples"):
        few_shot_accuracy(X, y, n_way=2, n_shot=1, n_queries=5)
    with pytest.raises(InvalidParameterError, match="n_way"):
        few_shot_accuracy(X, y, n_way=1)
    with pytest.raises(InvalidParameterError, match="n_shot"):
        few_shot_accuracy(X, y, n_way=2, n_shot=0)
    with pytest.raises(InvalidParameterError, match="metric"):
        few_shot_accuracy(X, y, n_way=2, n_queries=2, metric="manhattan")
    with pytest.raises(ValueError, match="inconsistent lengths"):
        few_shot_accuracy(X, y[:-1], n_way=2, n_queries=2)
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        few_shot_accuracy(bad, y, n_way=2, n_queries=2)
    with pytest.raises(ValueError, match="discrete class labels"):
        few_shot_accuracy(X, y + 0.5, n_way=2, n_queries=2)


def test_one_episode_has_no_interval():
    X, y = _blobs()
    accuracy, ci95 = few_shot_accuracy(X, y, n_episodes=1, n_queries=3, random_state=0)
    assert 0.0 <= accuracy <= 1.0 and math.isnan(ci95)


def test_euclidean_episodes_agree_with_brute_force_on_classes_far_apart():
    # ||p||^2 - 2 q.p cancelled the order-1 gaps of classes in two groups at +-1e8
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(10), 20)
    X = rng.randn(200, 4) + 3 * np.eye(10, 4)[y % 5]
    X[:, 0] += np.where(y < 5, 1e8, -1e8)

    def brute(seed, n_way=5, n_shot=5, n_queries=10, n_episodes=50):  # the documented draws
        classes, ye = np.unique(y, return_inverse=True)
        draw, acc = np.random.RandomState(seed), []
        for _ in range(n_episodes):
            picked = draw.choice(np.arange(classes.size), n_way, replace=False)
            P, Q = [], []
            for w, c in enumerate(picked):
                s = draw.choice(np.flatnonzero(ye == c), n_shot + n_queries, replace=False)
                P.append(X[s[:n_shot]].mean(0))
                Q += [(X[i], w) for i in s[n_shot:]]
            P = np.array(P)
            acc.append(np.mean([np.argmin(((P - q) ** 2).sum(1)) == w for q, w in Q]))
        return float(np.mean(acc))

    got = few_shot_accuracy(X, y, n_way=5, n_shot=5, n_queries=10, n_episodes=50,
                            random_state=0)[0]
    assert got == pytest.approx(brute(0), abs=1e-12)


def test_a_span_beyond_the_float64_range_gives_the_same_accuracy():
    # x - median overflowed for values spanning -1e308 .. 1e308 (scaled first now)
    y = np.repeat(np.arange(4), 6)
    X = (np.array([-1.0, -0.9, -0.8, 1.0])[y] + 0.001 * np.tile(np.arange(6), 4))[:, None]
    kw = dict(n_way=4, n_shot=1, n_queries=5, n_episodes=20, random_state=0)
    assert few_shot_accuracy(X * 1e308, y, **kw) == few_shot_accuracy(X, y, **kw) == (1.0, 0.0)


def test_a_huge_constant_feature_changes_no_accuracy():
    # scaling before centring flushed the informative feature (1e-25) under 1e300 to zero
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(5), 8)
    informative = (y + 0.05 * rng.randn(len(y))) * 1e-25
    kw = dict(n_way=5, n_shot=1, n_queries=5, n_episodes=50, random_state=0)
    with_offset = np.column_stack([np.full(len(y), 1e300), informative])
    without = np.column_stack([np.zeros(len(y)), informative])
    assert few_shot_accuracy(with_offset, y, **kw) == few_shot_accuracy(without, y, **kw)
    assert few_shot_accuracy(without, y, **kw)[0] == 1.0


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_episodes_split_over_several_chunks_give_the_same_accuracies(monkeypatch, metric):
    # the tests' episodes all fit in one chunk (_CHUNK = 2**22 elements); force several
    # chunks, one of them partial, and require the per-episode accuracies of one chunk
    from skdml.metrics import _few_shot

    X, y = _blobs()
    kw = dict(n_way=5, n_shot=2, n_queries=3, n_episodes=23, metric=metric, random_state=3)
    one_chunk = few_shot_accuracy(X, y, **kw)
    # 5 ways x 5 per class x 6 dims (x 5 ways for euclidean) per episode: 4 episodes a chunk
    monkeypatch.setattr(_few_shot, "_CHUNK", 4 * 5 * 5 * 6 * (5 if metric == "euclidean" else 1))
    assert few_shot_accuracy(X, y, **kw) == one_chunk
    monkeypatch.setattr(_few_shot, "_CHUNK", 1)  # one episode a chunk
    assert few_shot_accuracy(X, y, **kw) == one_chunk
    assert 0.0 < one_chunk[0] < 1.0
