"""Tests of skdml.retrieval.RetrievalIndex: exact search, add, save/load, errors, faiss."""

import importlib.util
import os
import pickle
import warnings

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.exceptions import NotFittedError
from sklearn.metrics import pairwise_distances
from sklearn.utils._param_validation import InvalidParameterError

from skdml.metrics import nearest_neighbors
from skdml.retrieval import RetrievalIndex

HAS_FAISS = importlib.util.find_spec("faiss") is not None


def _data(seed=0, n_gallery=60, n_queries=15, d=5):
    rng = np.random.RandomState(seed)
    G = rng.randn(n_gallery, d)
    G[10] = G[3]  # an exact duplicate: ties go to the lower index
    G[20:24] = np.round(G[20:24])  # a few lattice points, more ties
    Q = np.vstack([rng.randn(n_queries - 2, d), G[3], np.round(G[21]) + 0.5])
    y = np.array([f"item{i % 7}" for i in range(n_gallery)])
    return G, Q, y


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_exact_query_equals_nearest_neighbors(metric):
    G, Q, y = _data()
    G_before, Q_before = G.copy(), Q.copy()
    index = RetrievalIndex(metric=metric).fit(G, y)
    assert index.backend_ == "exact" and len(index) == 60
    distances, indices = index.query(Q, k=7)
    np.testing.assert_array_equal(indices, nearest_neighbors(Q, 7, X_ref=G, metric=metric))
    assert indices.dtype == np.int64 and distances.dtype == np.float64
    expected = pairwise_distances(Q, G, metric=metric)[np.arange(len(Q))[:, None], indices]
    np.testing.assert_allclose(distances, expected, rtol=1e-12, atol=1e-12)
    assert np.all(np.diff(distances, axis=1) >= 0)
    # without X: the gallery against itself, each item's own row excluded
    distances, indices = index.query(k=3)
    np.testing.assert_array_equal(indices, nearest_neighbors(G, 3, metric=metric))
    assert distances[3, 0] == pytest.approx(0.0, abs=1e-12) and indices[3, 0] == 10
    assert not np.any(indices == np.arange(60)[:, None])
    # the caller's arrays are never modified, and the index owns its copy of the gallery
    np.testing.assert_array_equal(G, G_before)
    np.testing.assert_array_equal(Q, Q_before)
    G[0] = 1e3
    assert index.embeddings_[0, 0] != 1e3


def test_distances_survive_extreme_scales():
    G, Q, _ = _data(seed=1)
    for scale in (1e-160, 1e160):
        distances, indices = RetrievalIndex().fit(G * scale).query(Q * scale, k=4)
        reference, ref_idx = RetrievalIndex().fit(G).query(Q, k=4)
        np.testing.assert_array_equal(indices, ref_idx)
        np.testing.assert_allclose(distances / scale, reference, rtol=1e-12)


def test_transformer_embeds_gallery_and_queries():
    G, Q, y = _data(d=8)
    pca = PCA(n_components=3, random_state=0).fit(G)
    index = RetrievalIndex(pca).fit(G, y)
    assert index.embeddings_.shape == (60, 3)
    distances, indices = index.query(Q, k=5)
    np.testing.assert_array_equal(
        indices, nearest_neighbors(pca.transform(Q), 5, X_ref=pca.transform(G)))
    with pytest.raises(ValueError, match="has 5 features, but PCA is expecting 8"):
        index.query(Q[:, :5])


def test_add_equals_fitting_everything_at_once():
    G, Q, y = _data()
    whole = RetrievalIndex().fit(G, y)
    grown = RetrievalIndex().fit(G[:25], y[:25]).add(G[25:40], y[25:40]).add(G[40:], y[40:])
    np.testing.assert_array_equal(grown.embeddings_, whole.embeddings_)
    np.testing.assert_array_equal(grown.labels_, whole.labels_)
    for a, b in zip(grown.query(Q, k=6), whole.query(Q, k=6)):
        np.testing.assert_array_equal(a, b)
    # a new item becomes the nearest neighbour of a query on top of it
    grown.add(Q[:1], ["new"])
    distances, indices = grown.query(Q[:1], k=1)
    assert indices[0, 0] == 60 and distances[0, 0] == 0.0 and grown.labels_[60] == "new"


@pytest.mark.parametrize("labels", ["strings", "ints", None])
def test_save_load_round_trip(tmp_path, labels):
    G, Q, y = _data()
    y = {"strings": y, "ints": np.arange(60) * 3, None: None}[labels]
    index = RetrievalIndex(metric="cosine", batch_size=8).fit(G.astype(np.float32), y)
    path = tmp_path / "gallery.npz"
    index.save(path)
    loaded = RetrievalIndex.load(path)
    assert loaded.get_params() == index.get_params()
    assert loaded.embeddings_.dtype == np.float32
    np.testing.assert_array_equal(loaded.embeddings_, index.embeddings_)
    if y is None:
        assert loaded.labels_ is None
    else:
        np.testing.assert_array_equal(loaded.labels_, index.labels_)
        assert loaded.labels_.dtype.kind == index.labels_.dtype.kind
    for a, b in zip(loaded.query(Q, k=4), index.query(Q, k=4)):
        np.testing.assert_array_equal(a, b)
    # parameters can be replaced at load; the loaded index keeps growing
    assert RetrievalIndex.load(path, metric="euclidean").metric == "euclidean"
    loaded.add(G[:2], None if y is None else y[:2])
    assert len(loaded) == 62
    # pickling works too
    again = pickle.loads(pickle.dumps(loaded))
    np.testing.assert_array_equal(again.query(Q, 2)[1], loaded.query(Q, 2)[1])


def test_save_refuses_to_overwrite(tmp_path):
    G, _, _ = _data()
    path = tmp_path / "index.npz"
    RetrievalIndex().fit(G).save(path)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        RetrievalIndex().fit(G[:5]).save(path)
    assert len(RetrievalIndex.load(path)) == 60  # untouched
    RetrievalIndex().fit(G[:5]).save(path, overwrite=True)
    assert len(RetrievalIndex.load(path)) == 5
    with pytest.raises(IsADirectoryError):
        RetrievalIndex().fit(G).save(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["index.npz"]  # no temporary file left


def test_load_rejects_foreign_and_unsafe_files(tmp_path):
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip file at all")
    with pytest.raises(ValueError, match="not a RetrievalIndex file"):
        RetrievalIndex.load(garbage)
    # an .npz holding a pickled object array is refused without unpickling it
    unsafe = tmp_path / "unsafe.npz"
    np.savez(unsafe, embeddings=np.zeros((2, 2)), meta=np.array([{"x": 1}], dtype=object))
    with pytest.raises(ValueError, match="not a RetrievalIndex file"):
        RetrievalIndex.load(unsafe)
    other = tmp_path / "other.npz"
    np.savez(other, embeddings=np.zeros((2, 2)), meta=np.array('{"format": "something"}'))
    with pytest.raises(ValueError, match="unknown format"):
        RetrievalIndex.load(other)
    with pytest.raises(FileNotFoundError):
        RetrievalIndex.load(tmp_path / "missing.npz")


def test_load_warns_when_the_transformer_is_missing(tmp_path):
    G, Q, _ = _data(d=8)
    pca = PCA(n_components=3).fit(G)
    path = tmp_path / "index.npz"
    RetrievalIndex(pca).fit(G).save(path)
    with pytest.warns(UserWarning, match="built with a PCA") as caught:
        RetrievalIndex.load(path)
    assert caught[0].filename == __file__  # the user's line, not retrieval.py's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = RetrievalIndex.load(path, transformer=pca)
    np.testing.assert_array_equal(loaded.query(Q, 3)[1], RetrievalIndex(pca).fit(G).query(Q, 3)[1])


def test_bad_input_errors():
    G, Q, y = _data()
    with pytest.raises(NotFittedError):
        RetrievalIndex().query(Q)
    with pytest.raises(NotFittedError):
        RetrievalIndex().add(Q)
    assert len(RetrievalIndex()) == 0
    with pytest.raises(InvalidParameterError, match="metric"):
        RetrievalIndex(metric="manhattan").fit(G)
    with pytest.raises(InvalidParameterError, match="transformer"):
        RetrievalIndex(transformer="pca").fit(G)
    index = RetrievalIndex().fit(G, y)
    with pytest.raises(ValueError, match="k=61 is too large: each query has only 60"):
        index.query(Q, k=61)
    with pytest.raises(ValueError, match="only 59 candidate"):
        index.query(k=60)
    with pytest.raises(ValueError, match="k must be a positive int"):
        index.query(Q, k=0)
    with pytest.raises(ValueError, match="needs at least one other item"):  # not "Use k <= 0"
        RetrievalIndex().fit(G[:1]).query(k=1)
    with pytest.raises(ValueError, match="X has 3 dimensions but the index holds 5"):
        index.query(Q[:, :3])
    bad = Q.copy()
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        index.query(bad)
    with pytest.raises(ValueError, match="pass y for the new items"):
        index.add(Q)
    with pytest.raises(ValueError, match="labels are strings but y holds numbers"):
        index.add(Q[:2], [1, 2])
    with pytest.raises(ValueError, match="2 items but y has 3 labels"):
        index.add(Q[:2], ["a", "b", "c"])
    with pytest.raises(ValueError, match="fitted without labels"):
        RetrievalIndex().fit(G).add(Q, np.arange(len(Q)))
    with pytest.raises(ValueError, match="numbers or strings"):
        RetrievalIndex().fit(G[:2], np.array([("a", 1), ("b", 2)], dtype="O,O"))
    assert len(index) == 60  # failed calls changed nothing


@pytest.mark.skipif(HAS_FAISS, reason="faiss is installed")
def test_faiss_backend_without_faiss():
    G, _, _ = _data()
    with pytest.raises(ImportError, match="pip install faiss-cpu"):
        RetrievalIndex(backend="faiss").fit(G)
    assert RetrievalIndex(backend="auto").fit(G).backend_ == "exact"


@pytest.mark.skipif(not HAS_FAISS, reason="faiss is not installed")
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_faiss_backend_agrees_with_exact(metric):
    rng = np.random.RandomState(0)
    G, Q = rng.randn(200, 6), rng.randn(30, 6)  # no near-ties at float32 precision
    exact = RetrievalIndex(metric=metric).fit(G)
    fast = RetrievalIndex(metric=metric, backend="faiss").fit(G)
    assert fast.backend_ == "faiss"
    for X in (Q, None):
        d_fast, i_fast = fast.query(X, k=5)
        d_exact, i_exact = exact.query(X, k=5)
        np.testing.assert_array_equal(i_fast, i_exact)
        np.testing.assert_allclose(d_fast, d_exact, rtol=1e-4, atol=1e-5)
    fast.add(Q[:1])
    assert fast.query(Q[:1], k=1)[1][0, 0] == 200


def test_add_refuses_labels_whose_common_type_would_change_some():
    rng = np.random.RandomState(0)
    ids = np.array([2**53 + 1, 2**53 + 2, 2**53 + 3])  # beyond float64's integers
    index = RetrievalIndex().fit(rng.randn(3, 2), ids)
    with pytest.raises(ValueError, match="do not share a type"):  # were rounded to 2**53
        index.add(rng.randn(1, 2), np.array([7.0]))
    np.testing.assert_array_equal(index.labels_, ids)
    assert len(index.embeddings_) == 3
    index.add(rng.randn(1, 2), np.array([7]))
    np.testing.assert_array_equal(index.labels_, np.r_[ids, 7])


class _FlatStandIn:
    """A numpy stand-in for faiss's flat indexes (faiss is not a test dependency)."""

    def __init__(self, d, inner_product):
        self.xb, self.inner_product = np.empty((0, d), np.float32), inner_product

    def add(self, x):
        self.xb = np.vstack([self.xb, x])

    def search(self, q, k):
        D = -(q @ self.xb.T) if self.inner_product else ((q[:, None] - self.xb[None]) ** 2).sum(-1)
        order = np.argsort(D, axis=1, kind="stable")[:, :k]
        D = np.take_along_axis(D, order, 1)
        return (-D if self.inner_product else D).astype(np.float32), order


def test_the_faiss_index_follows_a_metric_changed_after_a_query(monkeypatch):
    # the index cached for the first metric answered the second: cosine distances came back
    # negative, with the Euclidean neighbours
    import types

    import skdml.retrieval as retrieval
    stand_in = types.SimpleNamespace(IndexFlatL2=lambda d: _FlatStandIn(d, False),
                                     IndexFlatIP=lambda d: _FlatStandIn(d, True))
    monkeypatch.setattr(retrieval, "_faiss", lambda: stand_in)
    rng = np.random.RandomState(0)
    G, Q = rng.randn(20, 5), rng.randn(3, 5)
    index = RetrievalIndex(backend="faiss").fit(G)
    index.query(Q, k=2)
    index.set_params(metric="cosine")
    got, exact = index.query(Q, k=3), RetrievalIndex(metric="cosine").fit(G).query(Q, k=3)
    np.testing.assert_array_equal(got[1], exact[1])
    np.testing.assert_allclose(got[0], exact[0], atol=1e-6)


def test_the_gallery_is_the_index_own_copy_and_a_loaded_index_knows_its_width(tmp_path):
    from sklearn.preprocessing import FunctionTransformer
    X = np.random.RandomState(0).rand(5, 3)
    index = RetrievalIndex(FunctionTransformer()).fit(X)  # an identity step returns X itself
    X[:] = 0
    assert index.embeddings_.any()  # the caller's edit leaked into the gallery
    path = tmp_path / "index.npz"
    RetrievalIndex().fit(np.ones((4, 3))).save(path)
    assert RetrievalIndex.load(path).n_features_in_ == 3  # was missing after load


def test_numeric_labels_in_an_object_column_are_kept():
    pd = pytest.importorskip("pandas")
    labels = pd.Series([0.5, 1.0] * 5, dtype=object)  # "must hold numbers" refused them
    index = RetrievalIndex().fit(np.random.RandomState(0).rand(10, 4), labels)
    assert index.labels_.dtype == np.float64


def test_integer_label_tensors_keep_their_ids():
    # a torch tensor of labels became float64: 64-bit keys merged into one label
    import torch

    ids = [1234567890123456789, 1234567890123456790, 7]
    index = RetrievalIndex().fit(np.eye(3), y=torch.tensor(ids))
    assert index.labels_.dtype == np.int64 and index.labels_.tolist() == ids
    _, idx = index.query([[1.0, 0.0, 0.0]], k=1)
    assert index.labels_[idx[0, 0]] == ids[0]


def test_an_index_with_a_nan_label_takes_more_items():
    # fit takes NaN float labels; add compared them with themselves and refused every item
    index = RetrievalIndex().fit(np.eye(3), y=np.array([1.0, np.nan, 3.0]))
    index.add([[0.5, 0.5, 0.0]], y=np.array([4.0]))
    np.testing.assert_array_equal(index.labels_, [1.0, np.nan, 3.0, 4.0])


def test_items_added_after_a_faiss_query_are_found(monkeypatch):
    # After add(), a faiss-backend query sees the new items (the cached faiss index is
    # rebuilt).
    import types

    import skdml.retrieval as retrieval

    class Flat:
        def __init__(self, d):
            self.xb = np.empty((0, d), np.float32)

        def add(self, x):
            self.xb = np.vstack([self.xb, x])

        def search(self, q, k):
            D = ((q[:, None] - self.xb[None]) ** 2).sum(-1)
            order = np.argsort(D, axis=1, kind="stable")[:, :k]
            return np.take_along_axis(D, order, 1).astype(np.float32), order

    monkeypatch.setattr(retrieval, "_faiss",
                        lambda: types.SimpleNamespace(IndexFlatL2=Flat, IndexFlatIP=Flat))
    index = RetrievalIndex(backend="faiss").fit(np.array([[0.0, 0.0], [10.0, 10.0]]))
    index.query([[5.0, 5.0]], k=1)                 # builds the faiss index
    index.add([[5.0, 5.1]])
    d, i = index.query([[5.0, 5.0]], k=1)
    assert i.tolist() == [[2]], i


def test_n_features_in_comes_from_the_transformer():
    # RetrievalIndex(transformer).fit sets n_features_in_ to the transformer's (documented
    # attribute).

    X = np.random.RandomState(0).rand(12, 4)
    index = RetrievalIndex(PCA(2).fit(X)).fit(X)
    assert index.embeddings_.shape == (12, 2)
    assert getattr(index, "n_features_in_", None) == 4, getattr(index, "n_features_in_", None)


def test_cosine_distances_of_an_all_zero_row_are_one():
    # The zero-vector convention (similarity 0, distance 1 - 0 = 1, as scikit-learn's
    # cosine_distances): from a zero query to every item, and from any query to a zero item.
    G = np.array([[1.0, 0.0], [0.0, 0.0], [0.6, 0.8], [-1.0, 0.5]])
    Q = np.array([[0.0, 0.0], [1.0, 1.0]])
    distances, indices = RetrievalIndex(metric="cosine").fit(G).query(Q, k=4)
    assert indices.tolist()[0] == [0, 1, 2, 3]  # zero query: every item at 1, index order
    np.testing.assert_array_equal(distances[0], np.ones(4))
    assert distances[1][indices[1] == 1].tolist() == [1.0]
    expected = pairwise_distances(Q, G, metric="cosine")[np.arange(2)[:, None], indices]
    np.testing.assert_allclose(distances, expected, atol=1e-15)
    assert np.all(np.diff(distances, axis=1) >= 0)
