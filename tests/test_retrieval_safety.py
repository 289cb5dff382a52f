"""RetrievalIndex on hostile files and awkward inputs (issue 37).

Loading reads only the members the format defines, after checking their
declared sizes; cosine treats an all-zero row the one documented way in the
exact index, the scorers and faiss; big-endian float64 stays float64; a save
under a file that should be a folder names it.
"""

import json
import os
import re
import sys
import types
import warnings
import zipfile

import numpy as np
import pytest
from sklearn.metrics.pairwise import cosine_distances

from skdml.metrics import map_at_r, nearest_neighbors, recall_at_k
from skdml.retrieval import RetrievalIndex


def _saved(tmp_path, **fit):
    rng = np.random.RandomState(0)
    index = RetrievalIndex().fit(rng.rand(10, 3), **fit)
    path = tmp_path / "index.npz"
    index.save(path)
    return path


def test_load_refuses_a_member_the_format_does_not_define(tmp_path):
    path = _saved(tmp_path, y=np.arange(10))
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("junk.npy", "w", force_zip64=True) as fh:  # 64 MiB of zeros, deflated
            block = b"\0" * (1 << 22)
            for _ in range(16):
                fh.write(block)
    assert os.path.getsize(path) < 1 << 20
    with pytest.raises(ValueError, match="'junk.npy' that the format does not define"):
        RetrievalIndex.load(path)


def _rewrite(path, replace):
    """Copy the index file with some members replaced: ``{name: (bytes, compress_type)}``."""
    with zipfile.ZipFile(path) as zf:
        members = {info.filename: zf.read(info) for info in zf.infolist()}
    members.update({k: v for k, v in replace.items() if not isinstance(v, tuple)})
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            compress = zipfile.ZIP_STORED
            if isinstance(replace.get(name), tuple):
                data, compress = replace[name]
            zf.writestr(name, data, compress_type=compress)


def _npy(array):
    import io
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def test_load_checks_declared_sizes_against_the_metadata(tmp_path):
    path = _saved(tmp_path)
    _rewrite(path, {"embeddings.npy": _npy(np.zeros((11, 3)))})  # one row more than the meta
    with pytest.raises(ValueError, match=r"shape \(11, 3\) but the metadata says \(10, 3\)"):
        RetrievalIndex.load(path)


def test_load_refuses_compressed_members(tmp_path):
    path = _saved(tmp_path)
    with zipfile.ZipFile(path) as zf:
        data = zf.read("embeddings.npy")
    _rewrite(path, {"embeddings.npy": (data, zipfile.ZIP_DEFLATED)})
    _refused(path, "compressed")


def _refused(path, pattern):
    """``load`` refuses ``path`` for the reason ``pattern`` (read after the path in the
    message: "compressed" once matched the test's own folder name, with the check removed)."""
    with pytest.raises(ValueError) as info:
        RetrievalIndex.load(path)
    reason = str(info.value).split("RetrievalIndex.save: ", 1)[-1]
    assert re.search(pattern, reason), reason


def _members(path):
    with zipfile.ZipFile(path) as zf:
        return [(info.filename, zf.read(info)) for info in zf.infolist()]


def _write(path, items):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in items:
            zf.writestr(name, data)


def test_load_refuses_a_member_stored_twice(tmp_path):
    path = _saved(tmp_path)
    members = _members(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile: "Duplicate name"
        _write(path, members + [("embeddings.npy", _npy(np.full((10, 3), 7.0)))])
    _refused(path, "twice")


def test_load_refuses_bytes_past_what_a_member_declares(tmp_path):
    path = _saved(tmp_path)
    _write(path, [(n, d + (b"\0" * 64 if n == "embeddings.npy" else b""))
                  for n, d in _members(path)])
    _refused(path, r"declares \d+ bytes but its header describes")


def test_load_refuses_a_dtype_the_metadata_does_not_say(tmp_path):
    path = _saved(tmp_path)
    _write(path, [(n, _npy(np.zeros((10, 3), np.float32)) if n == "embeddings.npy" else d)
                  for n, d in _members(path)])
    _refused(path, "dtype float32 but the metadata says")


def test_load_refuses_another_format_version(tmp_path):
    import io
    path = _saved(tmp_path)
    members = _members(path)
    meta = json.loads(str(np.load(io.BytesIO(dict(members)["meta.npy"]))))
    meta["version"] = 2
    _write(path, [(n, _npy(np.array(json.dumps(meta))) if n == "meta.npy" else d)
                  for n, d in members])
    _refused(path, "format version 2")


def test_load_refuses_a_header_that_lies_about_the_size(tmp_path):
    path = _saved(tmp_path)
    data = _npy(np.zeros((10, 3)))
    _rewrite(path, {"embeddings.npy": data[:-8]})  # truncated data behind a valid header
    with pytest.raises(ValueError, match="declares"):
        RetrievalIndex.load(path)


def test_saved_file_round_trips_with_its_sizes(tmp_path):
    path = _saved(tmp_path, y=np.array([f"i{i}" for i in range(10)]))
    with zipfile.ZipFile(path) as zf:
        meta = json.loads(str(np.load(zf.open("meta.npy"))))
    assert (meta["n_items"], meta["n_dims"]) == (10, 3)
    loaded = RetrievalIndex.load(path)
    assert loaded.embeddings_.shape == (10, 3) and loaded.labels_[3] == "i3"


# ------------------------------------------------------------------ cosine zero rows
def test_cosine_zero_gallery_row_is_at_distance_one_and_rows_stay_sorted():
    index = RetrievalIndex(metric="cosine").fit(np.array([[0.0, 0.0], [0.3, 1.0]]))
    distances, indices = index.query([[1.0, 0.0]], k=2)
    assert indices.tolist() == [[1, 0]]
    np.testing.assert_allclose(distances, [[1 - 0.3 / np.hypot(0.3, 1.0), 1.0]])
    assert np.all(np.diff(distances, axis=1) >= 0)


def test_cosine_zero_rows_match_sklearn_cosine_distances():
    # one convention everywhere: an all-zero row has similarity 0 to every row, another
    # all-zero row included (scikit-learn's cosine_distances gives 1 for each such pair)
    rng = np.random.RandomState(1)
    X = rng.randn(40, 3)
    X[rng.rand(40) < 0.3] = 0.0
    D = cosine_distances(X)
    np.fill_diagonal(D, np.inf)
    expected = np.array([np.lexsort((np.arange(40), row))[:39] for row in D])
    got = nearest_neighbors(X, 39, metric="cosine")
    np.testing.assert_array_equal(got, expected)
    index = RetrievalIndex(metric="cosine").fit(X)
    distances, indices = index.query(None, k=39)
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_allclose(distances, np.take_along_axis(D, expected, axis=1), atol=1e-12)
    assert np.all(np.diff(distances, axis=1) >= 0)


def test_a_zero_row_elsewhere_does_not_reorder_the_other_rows_under_cosine():
    # with an all-zero row present, every row gains a lift coordinate, and the float64 keys
    # were summed over d + 1 terms: another order of summation, another last bit, and here
    # the order of two near-tied references flipped (Recall@1 1.0 without the zero row, 0.0
    # with it; the index's distances decreased along the row)
    q = np.array([[0.0, 2.0, 2.0, -1.0, 0.0, 1.0, -1.0]])
    G = np.array([[0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]])
    G0 = np.vstack([G, np.zeros((1, 7))])
    assert nearest_neighbors(q, 2, X_ref=G, metric="cosine").tolist() == [[1, 0]]
    assert nearest_neighbors(q, 2, X_ref=G0, metric="cosine").tolist() == [[1, 0]]
    distances, indices = RetrievalIndex(metric="cosine").fit(G0).query(q, k=3)
    assert indices.tolist() == [[1, 0, 2]] and np.all(np.diff(distances, axis=1) >= 0)
    assert recall_at_k(q, ["B"], 1, metric="cosine", X_ref=G0, y_ref=["A", "B", "C"]) == 1.0


def test_cosine_distances_do_not_depend_on_the_memory_layout():
    # a Fortran-ordered gallery's rows were normalised with another summation order: an
    # exact duplicate came back at a distance of 7e-33 and rows of distances decreased
    rng = np.random.default_rng(1)
    X = np.full((10, 8), 0.1)
    X[np.arange(10), rng.integers(0, 8, 10)] += rng.choice([1 / 3, 2 / 3], 10)
    results = [RetrievalIndex(metric="cosine").fit(A).query(None, k=9)
               for A in (np.ascontiguousarray(X, dtype=np.float32),
                         np.asfortranarray(X, dtype=np.float32))]
    for distances, _ in results:
        assert np.all(np.diff(distances, axis=1) >= 0)
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_map_at_r_with_zero_rows_matches_a_float64_reference():
    rng = np.random.RandomState(0)
    X = rng.randn(80, 4)
    X[rng.rand(80) < 0.35] = 0.0
    y = rng.randint(0, 3, 80)
    D = cosine_distances(X)
    np.fill_diagonal(D, np.inf)
    aps, hits = [], []
    for i in range(len(y)):
        order = np.lexsort((np.arange(len(y)), D[i]))[:-1]
        R = int(np.sum(y == y[i]) - 1)
        rel = y[order[:R]] == y[i]
        aps.append(np.sum(np.cumsum(rel) / np.arange(1, R + 1) * rel) / R)
        hits.append(y[order[0]] == y[i])
    assert map_at_r(X, y, metric="cosine") == pytest.approx(np.mean(aps), abs=1e-12)
    assert recall_at_k(X, y, k=1, metric="cosine") == pytest.approx(np.mean(hits), abs=1e-12)


def test_faiss_backend_gives_zero_rows_distance_one(monkeypatch):
    class FlatIP:  # the two calls of faiss's flat index the backend makes, in numpy
        def __init__(self, d):
            self.rows = np.empty((0, d), dtype=np.float32)

        def add(self, rows):
            self.rows = np.vstack([self.rows, rows])

        def search(self, Q, k):
            S = Q @ self.rows.T
            order = np.argsort(-S, axis=1, kind="stable")[:, :k]
            return np.take_along_axis(S, order, axis=1), order

    monkeypatch.setitem(sys.modules, "faiss", types.SimpleNamespace(IndexFlatIP=FlatIP))
    G = np.array([[0.0, 0.0], [0.3, 1.0]])
    exact = RetrievalIndex(metric="cosine").fit(G).query([[1.0, 0.0]], k=2)
    faiss_ = RetrievalIndex(metric="cosine", backend="faiss").fit(G).query([[1.0, 0.0]], k=2)
    np.testing.assert_array_equal(faiss_[1], exact[1])
    np.testing.assert_allclose(faiss_[0], exact[0], atol=1e-6)


# ------------------------------------------------------------------ dtypes and paths
@pytest.mark.parametrize("dtype", [">f8", "<f8", np.int64])
def test_float64_in_any_byte_order_is_kept_as_float64(dtype):
    X = (np.arange(12).reshape(4, 3) * 1.000000001).astype(dtype)
    index = RetrievalIndex().fit(X)
    assert index.embeddings_.dtype == np.float64
    np.testing.assert_array_equal(index.embeddings_, X.astype(np.float64))


def test_save_under_a_file_names_the_file(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("x")
    index = RetrievalIndex().fit(np.eye(3))
    with pytest.raises(NotADirectoryError, match="not_a_folder' is a file, not a folder"):
        index.save(blocker / "sub" / "index.npz")


# ------------------------------------------------------------------ layout (issue 38)
def test_file_helpers_live_in_utils_and_retrieval_uses_the_metrics_package():
    import ast
    import pathlib

    import skdml.retrieval
    from skdml._utils import (  # the shared file helpers
        atomic_write_bytes,
        check_output_file,
    )

    assert atomic_write_bytes.__module__ == check_output_file.__module__ == "skdml._utils._files"
    tree = ast.parse(pathlib.Path(skdml.retrieval.__file__).read_text())
    private = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and node.module and (node.module.startswith("metrics._")
                                    or node.module.startswith("_training"))]
    assert private == [], private  # only the package-level seam of skdml.metrics


def test_a_file_created_during_a_write_without_overwrite_is_not_replaced(tmp_path, monkeypatch):
    # the existence check runs before the export; a file that appears before the final
    # rename must survive it (the rename replaced it)
    from skdml._utils import _files
    path = tmp_path / "embedding.pt"
    real_mkstemp = _files.tempfile.mkstemp

    def mkstemp_then_someone_writes(*args, **kwargs):
        out = real_mkstemp(*args, **kwargs)
        path.write_bytes(b"theirs")
        return out

    monkeypatch.setattr(_files.tempfile, "mkstemp", mkstemp_then_someone_writes)
    with pytest.raises(FileExistsError, match="created while writing"):
        _files.atomic_write_bytes(path, b"ours", overwrite=False)
    assert path.read_bytes() == b"theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["embedding.pt"]  # no temporary left


class _FlatL2:
    """faiss's flat L2 index in numpy float32: squared distances, -1 where none is finite."""

    def __init__(self, d):
        self.rows = np.empty((0, d), dtype=np.float32)

    def add(self, rows):
        self.rows = np.vstack([self.rows, rows])

    def search(self, Q, k):
        with np.errstate(over="ignore", invalid="ignore"):
            D = ((Q[:, None, :] - self.rows[None]) ** 2).sum(-1, dtype=np.float32)
        D = np.where(np.isfinite(D), D, np.inf)
        order = np.argsort(D, axis=1, kind="stable")[:, :k]
        D = np.take_along_axis(D, order, axis=1)
        return D, np.where(np.isfinite(D), order, -1)


@pytest.mark.parametrize("scale", [1e20, 1e30, 1e-25, 1.0])
def test_faiss_backend_ranks_any_finite_scale_like_the_exact_one(monkeypatch, scale):
    monkeypatch.setitem(sys.modules, "faiss", types.SimpleNamespace(IndexFlatL2=_FlatL2))
    G = np.random.RandomState(0).randn(8, 3) * scale
    exact = RetrievalIndex().fit(G).query(G[:2], k=3)
    fast = RetrievalIndex(backend="faiss").fit(G).query(G[:2], k=3)
    np.testing.assert_array_equal(fast[1], exact[1])
    np.testing.assert_allclose(fast[0], exact[0], rtol=1e-5)
    with pytest.raises(ValueError, match="fewer neighbours"):  # a query far beyond the gallery
        RetrievalIndex(backend="faiss").fit(G).query(G[:1] + 1e30 * max(scale, 1.0), k=3)


@pytest.mark.parametrize("make", [lambda G: __import__("torch").tensor(G.copy()),
                                  lambda G: __import__("pandas").DataFrame(G.copy())],
                         ids=["tensor", "DataFrame"])
def test_the_index_owns_its_gallery_whatever_the_transformer_returns(make):
    from sklearn.preprocessing import FunctionTransformer

    G = np.random.RandomState(0).randn(5, 3)
    X = make(G)
    index = RetrievalIndex(FunctionTransformer()).fit(X)
    if hasattr(X, "iloc"):
        X.iloc[:, :] = 0.0
    else:
        X.zero_()
    np.testing.assert_array_equal(index.embeddings_, G)


def test_integer_ids_stay_exact_or_are_refused():
    ix = RetrievalIndex().fit(np.eye(3), y=[1, 2**63, 2**63 + 1])
    assert ix.labels_.dtype == np.uint64 and ix.labels_[1] != ix.labels_[2]
    with pytest.raises(ValueError, match="fit no 64-bit integer type"):
        RetrievalIndex().fit(np.eye(3), y=[-1, 2**63, 2**63 + 1])
    with pytest.raises(ValueError, match="fit no 64-bit integer type"):
        RetrievalIndex().fit(np.eye(2), y=np.array([2**64, 2**64 + 1], dtype=object))


def test_save_takes_a_real_boolean_overwrite(tmp_path):
    path = tmp_path / "work.npz"
    path.write_text("precious work")
    with pytest.raises(TypeError, match="overwrite must be True or False"):
        RetrievalIndex().fit(np.eye(3)).save(path, overwrite="False")
    assert path.read_text() == "precious work"


def test_load_refuses_members_larger_than_the_file_and_deep_metadata(tmp_path):
    import io
    import struct

    # header, zip directory and metadata agree on a 2 GiB array; the file holds 64 bytes
    n, dims = 2**16, 2**12
    meta = json.loads(str(np.load(_saved(tmp_path))["meta"]))
    meta.update(n_items=n, n_dims=dims, embeddings_dtype="<f8", labels_dtype=None)
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f8", "fortran_order": False,
                                                  "shape": (n, dims)})
    emb = buffer.getvalue() + b"\0" * 64
    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("meta.npy", _npy(np.array(json.dumps(meta))))
        zf.writestr("embeddings.npy", emb)
    raw = bytearray(path.read_bytes())
    entry = raw.find(b"PK\x01\x02", raw.find(b"PK\x01\x02") + 4)  # embeddings' directory
    declared = len(emb) - 64 + n * dims * 8
    struct.pack_into("<II", raw, entry + 20, declared, declared)
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="more than the file's .* can hold"):
        RetrievalIndex.load(path)
    deep = tmp_path / "deep.npz"
    with zipfile.ZipFile(deep, "w") as zf:
        zf.writestr("meta.npy", _npy(np.array("[" * 100000 + "]" * 100000)))
        zf.writestr("embeddings.npy", _npy(np.eye(2)))
    with pytest.raises(ValueError, match="unreadable metadata"):
        RetrievalIndex.load(deep)
    with pytest.raises(NotADirectoryError):
        RetrievalIndex.load(deep / "x.npz")


def test_a_refit_forgets_the_previous_feature_count():
    class FirstTwo:
        def transform(self, X):
            return np.asarray(X, dtype=float)[:, :2]

    X = np.random.RandomState(0).randn(10, 6)
    index = RetrievalIndex().fit(X)
    assert index.n_features_in_ == 6
    index.set_params(transformer=FirstTwo()).fit(X[:, :4])
    assert not hasattr(index, "n_features_in_")


def test_load_refuses_metadata_over_its_size_limit(tmp_path):
    # a well-formed index whose JSON metadata is padded past _META_BYTES (1 MiB) is refused
    # before the metadata is read; the same padding under the limit still loads
    path = _saved(tmp_path)
    meta = json.loads(str(np.load(path)["meta"]))
    for pad, refused in ((300_000, True), (1_000, False)):  # 4 bytes a character in a '<U' array
        _rewrite(path, {"meta.npy": _npy(np.array(json.dumps({**meta, "pad": "x" * pad})))})
        if refused:
            _refused(path, "metadata of dtype .* bytes")
        else:
            assert len(RetrievalIndex.load(path)) == 10
