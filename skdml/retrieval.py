"""Search a gallery of embeddings with new queries: :class:`RetrievalIndex`.

A fitted metric learner (or any transformer) embeds a gallery once; the index
then answers ``query(X, k)`` with the distances and indices of the ``k``
nearest gallery items, as scikit-learn's ``kneighbors`` does, takes new items
with ``add``, and is saved to / loaded from one ``.npz`` file (arrays and JSON
metadata only, read without unpickling anything).

The default ``"exact"`` backend is the neighbour engine of :mod:`skdml.metrics`
(:func:`~skdml.metrics.nearest_neighbors`): the result is that of a float64
brute force, ties going to the lower index. ``"faiss"`` uses faiss's flat
(brute-force, float32) index when faiss is installed.
"""

from __future__ import annotations

import io
import json
import math
import numbers
import os
import zipfile
from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import HasMethods, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._utils import (atomic_write_bytes, check_orderable_labels, check_output_file, integer_ids,
                     is_missing_label, keep_label_types, warn_user)
from .metrics import (as_host_labels, check_embeddings, label_kind, nearest_neighbors,
                      normalise_rows, pair_distances)
from ._utils._params import positive_int
from ._utils._torch import DEVICE_CONSTRAINT

__all__ = ["RetrievalIndex"]

#: Identifies the saved file; ``version`` grows when the layout changes.
_FORMAT = "skdml.retrieval.RetrievalIndex"
_VERSION = 1
#: The members a saved index may hold (``<name>.npy``), and the largest metadata member.
_MEMBERS = ("meta", "embeddings", "labels")
_META_BYTES = 1 << 20


def _faiss():
    """The faiss module, or ``None`` when it is not installed."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def _member_header(zf, info, bad):
    """``(shape, dtype, order)`` from the ``.npy`` header of a member, after checking that
    its declared size is exactly the header plus the data the header describes."""
    try:
        with zf.open(info) as fh:
            version = np.lib.format.read_magic(fh)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, _fortran, dtype = read(fh)
            header = fh.tell()
    except Exception as exc:  # noqa: BLE001 - any malformed header
        raise bad(f"member {info.filename!r} has no valid .npy header ({exc})") from None
    if dtype.hasobject:
        raise bad(f"member {info.filename!r} holds Python objects (dtype {dtype})")
    expected = header + math.prod(shape) * dtype.itemsize
    if info.file_size != expected:
        raise bad(f"member {info.filename!r} declares {info.file_size} bytes but its header "
                  f"describes {expected} (dtype {dtype}, shape {shape})")
    return shape, dtype


def _read_index_file(path, bad):
    """``(arrays, meta)`` of an index file: the members the format defines, and only them.

    Each member is checked before it is read: a name the format defines, stored
    uncompressed (as :meth:`RetrievalIndex.save` writes it, so no member can be
    larger than the file), no Python objects, and a declared size equal to what
    its ``.npy`` header describes and, for the embeddings and labels, to what
    the metadata says. Nothing else in the file is read.
    """
    try:
        zf = zipfile.ZipFile(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        raise
    except Exception as exc:  # not a zip, truncated
        raise bad(f"{type(exc).__name__}: {exc}") from None
    with zf:
        infos = {}
        file_size = os.path.getsize(path)
        for info in zf.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name not in _MEMBERS:
                raise bad(f"it holds a member {info.filename!r} that the format does not "
                          f"define (only {', '.join(m + '.npy' for m in _MEMBERS)})")
            if name in infos:
                raise bad(f"it holds the member {info.filename!r} twice")
            if info.compress_type != zipfile.ZIP_STORED:
                raise bad(f"member {info.filename!r} is compressed; RetrievalIndex.save "
                          "stores members uncompressed")
            # stored: the member's bytes lie in the file, so it cannot declare more
            if info.compress_size != info.file_size or \
                    info.header_offset + info.file_size > file_size:
                raise bad(f"member {info.filename!r} declares {info.file_size} bytes, more "
                          f"than the file's {file_size} can hold")
            infos[name] = info
        if "meta" not in infos or "embeddings" not in infos:
            raise bad("it lacks the 'meta' or 'embeddings' array")
        shape, dtype = _member_header(zf, infos["meta"], bad)
        if shape != () or dtype.kind != "U" or infos["meta"].file_size > _META_BYTES:
            raise bad(f"metadata of dtype {dtype}, shape {shape}, "
                      f"{infos['meta'].file_size} bytes")
        try:
            with zf.open(infos["meta"]) as fh:
                meta = json.loads(str(np.lib.format.read_array(fh, allow_pickle=False)))
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            raise bad(f"unreadable metadata ({type(exc).__name__})") from None
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            raise bad("unknown format")
        if meta.get("version") != _VERSION:
            raise bad(f"format version {meta.get('version')!r}; this skdml reads version "
                      f"{_VERSION}")
        expected = {"embeddings": (meta.get("n_items"), meta.get("n_dims"),
                                   meta.get("embeddings_dtype")),
                    "labels": (meta.get("n_items"), None, meta.get("labels_dtype"))}
        arrays = {"meta": meta}
        for name in ("embeddings", "labels"):
            if name not in infos:
                continue
            shape, dtype = _member_header(zf, infos[name], bad)
            n_items, n_dims, descr = expected[name]
            want = (n_items,) if name == "labels" else (n_items, n_dims)
            if n_items is not None and shape != want:  # older files lack the sizes
                raise bad(f"member {name!r} has shape {shape} but the metadata says {want}")
            if descr is not None and np.lib.format.dtype_to_descr(dtype) != descr:
                raise bad(f"member {name!r} has dtype {dtype} but the metadata says {descr!r}")
            if name == "embeddings" and dtype.kind != "f":
                raise bad(f"embeddings of dtype {dtype} and shape {shape}")
            try:
                with zf.open(infos[name]) as fh:
                    arrays[name] = np.lib.format.read_array(fh, allow_pickle=False)
            except (EOFError, ValueError, zipfile.BadZipFile) as exc:
                raise bad(f"member {name!r} is unreadable ({type(exc).__name__}: {exc})") \
                    from None
    return arrays, meta


def _check_labels(y, n_samples, what):
    """Item labels (any ids: class labels, file names, database keys) as a savable 1-D array."""
    if isinstance(y, (list, tuple)) and y and all(
            isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)) for v in y):
        y = integer_ids(list(y))  # numpy would make ids past int64 float64 (2**63 + 1 -> 2**63)
    y = np.asarray(as_host_labels(keep_label_types(y)))
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.ravel()
    if y.ndim != 1:
        raise ValueError(f"y must be a 1-D array of item labels, got shape {y.shape}.")
    if y.shape[0] != n_samples:
        raise ValueError(f"{what} has {n_samples} items but y has {y.shape[0]} labels: give "
                         "one label per item.")
    if y.dtype == object:
        values = y.tolist()
        if all(isinstance(v, str) for v in values):
            y = np.array(values, dtype=str)
        elif all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values):
            y = integer_ids(values)
        elif all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):
            y = np.array(values, dtype=np.float64)  # numbers in an object column (pandas)
        else:
            missing = next((i for i, v in enumerate(values) if v is None or
                            (is_missing_label(v) and not isinstance(v, float))), None)
            if missing is not None:  # None or pandas NA (a float NaN is a label here)
                raise ValueError(f"y contains a missing label (None or pandas NA) at position "
                                 f"{missing}; give every item a label, or none (y=None).")
            check_orderable_labels(y)  # numbers beside strings: named as such
    if y.dtype.kind not in "biufU":
        raise ValueError(
            f"y must hold numbers or strings (got dtype {y.dtype}): the index stores its labels "
            "in a plain array file, never as pickled objects. Map other labels to ints or "
            "strings first.")
    return y


class RetrievalIndex(BaseEstimator):
    """A searchable gallery of embeddings: query it, add to it, save it, load it.

    ``fit(X, y)`` stores the gallery (embedded by ``transformer.transform``
    when a fitted transformer is given, else ``X`` is already embedded) and its
    optional labels; ``query(X, k)`` returns the distances and indices of the
    ``k`` nearest gallery items of each new query, like scikit-learn's
    ``NearestNeighbors.kneighbors``; ``add`` appends items; ``save`` and
    :meth:`load` keep the index in one ``.npz`` file.

    Parameters
    ----------
    transformer : object with a ``transform`` method, default=None
        A *fitted* transformer (e.g. :class:`~skdml.DeepMetricTransformer`,
        :class:`~skdml.ECAML`, a ``Pipeline``) that embeds the gallery and the
        queries. It is used as it is, never refitted nor copied. ``None``: the
        inputs are embeddings already.
    metric : {"euclidean", "cosine"}, default="euclidean"
        Distance between embeddings. ``"cosine"`` distances are
        ``1 - cosine similarity``, computed as half the squared distance of the
        rows scaled to unit norm (exact at large offsets). An all-zero row has
        similarity 0 to every row, another all-zero row included: distance 1,
        with both backends (the convention of ``doc/metrics.md``, "Cosine and
        all-zero rows").
    backend : {"exact", "faiss", "auto"}, default="exact"
        ``"exact"``: :func:`skdml.metrics.nearest_neighbors`, the order of a
        float64 brute force, ties to the lower index, on the GPU when one is
        present. ``"faiss"``: faiss's flat index (brute force in float32,
        multi-threaded; near-ties may be ordered differently); raises if
        faiss is not installed. ``"auto"``: faiss when it is installed, else
        exact.
    batch_size : int, default=None
        Queries per block of the exact search; ``None`` sizes blocks from a
        256 MiB budget.
    device : str or torch.device, default=None
        Where the exact search runs; ``None`` or ``"auto"`` uses CUDA when
        available.

    Attributes
    ----------
    embeddings_ : ndarray of shape (n_items, n_dims)
        The gallery's embeddings (float32 kept, anything else float64), in
        the order they were added.
    labels_ : ndarray of shape (n_items,) or None
        The items' labels (class labels or any ids: numbers or strings), or
        ``None`` for an index fitted without ``y``.
    backend_ : {"exact", "faiss"}
        The backend in use.
    n_features_in_ : int
        Number of features of ``X`` seen in ``fit`` (the embedding's width
        without a transformer, else the transformer's ``n_features_in_``, when
        it has one).

    See Also
    --------
    skdml.metrics.nearest_neighbors : The exact search behind ``query``.
    skdml.deep.export_embedding : Export a deep learner's network for serving.

    Notes
    -----
    The file written by :meth:`save` holds the embeddings, the labels and a
    JSON record of the parameters (the transformer only by its class name:
    pass the transformer again to :meth:`load`). It is read with
    ``numpy.load(allow_pickle=False)``, so loading a file runs no code.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.retrieval import RetrievalIndex
    >>> gallery = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    >>> index = RetrievalIndex().fit(gallery, y=["a", "b", "c"])
    >>> distances, indices = index.query([[0.9, 0.1], [0.0, 1.5]], k=2)
    >>> indices
    array([[1, 0],
           [2, 0]])
    >>> distances.round(3)
    array([[0.141, 0.906],
           [0.5  , 1.5  ]])
    >>> index.labels_[indices[:, 0]]
    array(['b', 'c'], dtype='<U1')
    >>> len(index.add([[5.0, 5.0]], y=["d"]))
    4
    """

    _parameter_constraints = {
        "transformer": [None, HasMethods(["transform"])],
        "metric": [StrOptions({"euclidean", "cosine"})],
        "backend": [StrOptions({"exact", "faiss", "auto"})],
        "batch_size": [positive_int(), None],
        "device": DEVICE_CONSTRAINT,
    }

    def __init__(self, transformer=None, *, metric="euclidean", backend="exact",
                 batch_size=None, device=None):
        self.transformer = transformer
        self.metric = metric
        self.backend = backend
        self.batch_size = batch_size
        self.device = device

    def __len__(self):
        """Number of items in the index (0 before ``fit``)."""
        embeddings = getattr(self, "embeddings_", None)
        return 0 if embeddings is None else embeddings.shape[0]

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_faiss_index", None)  # rebuilt on the next faiss query
        return state

    # ------------------------------------------------------------------ inputs
    def _embed(self, X, name):
        if self.transformer is None:
            return check_embeddings(X, name)
        Z = self.transformer.transform(X)
        return check_embeddings(Z, f"the embedding of {name} by {type(self.transformer).__name__}")

    def _resolve_backend(self):
        if self.backend == "exact":
            return "exact"
        if _faiss() is not None:
            return "faiss"
        if self.backend == "faiss":
            raise ImportError("backend='faiss' needs the faiss package (pip install faiss-cpu); "
                              "use backend='exact' (the default) or 'auto'.")
        return "exact"

    def _check_width(self, Z, name):
        if Z.shape[1] != self.embeddings_.shape[1]:
            raise ValueError(
                f"{name} has {Z.shape[1]} dimensions but the index holds "
                f"{self.embeddings_.shape[1]}-dimensional embeddings: query and add with the "
                "same embedding (transformer) as the gallery.")

    # ------------------------------------------------------------------ building
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Store the gallery ``X`` (embedded by ``transformer`` if given) and its labels.

        Parameters
        ----------
        X : array-like of shape (n_items, n_dims), or inputs of ``transformer``
            The gallery: embeddings, or what ``transformer.transform`` accepts.
        y : array-like of shape (n_items,), default=None
            Labels of the items (numbers or strings), kept in ``labels_``.

        Returns
        -------
        self : RetrievalIndex
            The fitted index.
        """
        backend = self._resolve_backend()  # before embedding: fail fast without faiss
        Z = self._embed(X, "X")
        if self.transformer is None or not Z.flags.owndata or (
                isinstance(X, np.ndarray) and np.may_share_memory(Z, X)):
            # the index owns its gallery: later edits of X do not leak in (a transformer may
            # return its input, or a view of it, an array, a tensor or a DataFrame)
            Z = np.array(Z, copy=True)
        labels = None if y is None else _check_labels(y, Z.shape[0], "X")
        self.backend_ = backend
        self.__dict__.pop("n_features_in_", None)  # a refit's transformer may not know it
        if self.transformer is None:
            self.n_features_in_ = Z.shape[1]
        elif hasattr(self.transformer, "n_features_in_"):
            self.n_features_in_ = self.transformer.n_features_in_
        self.embeddings_ = Z
        self.labels_ = labels
        self.__dict__.pop("_faiss_index", None)
        return self

    def add(self, X, y=None):
        """Append items to the gallery; they get the next indices.

        Parameters
        ----------
        X : array-like of shape (n_new, n_dims), or inputs of ``transformer``
            The new items.
        y : array-like of shape (n_new,), default=None
            Their labels: required when the index has labels, refused when it
            has none; numbers for numbers, strings for strings.

        Returns
        -------
        self : RetrievalIndex
            The index, grown by ``n_new`` items.
        """
        check_is_fitted(self, "embeddings_")
        Z = self._embed(X, "X")
        self._check_width(Z, "X")
        if (y is None) != (self.labels_ is None):
            raise ValueError(
                "The index has labels: pass y for the new items." if y is None else
                "The index was fitted without labels: add items without y (or refit with y).")
        labels = None
        if y is not None:
            new = _check_labels(y, Z.shape[0], "X")
            kinds = [label_kind(a) for a in (self.labels_, new)]  # "biufU" only, no objects
            if kinds[0] != kinds[1]:
                raise ValueError(f"The index's labels are {kinds[0]} but y holds {kinds[1]}: keep "
                                 "one kind of label.")
            labels = np.concatenate([self.labels_, new])
            n_old = len(self.labels_)  # each part read back in its own type, unchanged
            nan = labels.dtype.kind == "f"  # a NaN label (fit takes one) equals itself here
            if not (np.array_equal(labels[:n_old].astype(self.labels_.dtype), self.labels_,
                                   equal_nan=nan and self.labels_.dtype.kind == "f")
                    and np.array_equal(labels[n_old:].astype(new.dtype), new,
                                       equal_nan=nan and new.dtype.kind == "f")):
                raise ValueError(
                    f"The index's labels ({self.labels_.dtype}) and y ({new.dtype}) do not "
                    f"share a type that keeps both exactly (as {labels.dtype} some labels "
                    "change): pass y with the index's label type.")
        self.embeddings_ = np.concatenate([self.embeddings_, Z])
        self.labels_ = labels
        self.__dict__.pop("_faiss_index", None)
        return self

    # ------------------------------------------------------------------ search
    def query(self, X=None, k=1):
        """Distances and indices of the ``k`` nearest gallery items of each query.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_dims), inputs of ``transformer``, or None
            The queries. ``None`` queries the gallery with itself, each item's
            own row excluded (as ``kneighbors()`` without ``X``).
        k : int, default=1
            Neighbours per query, at most the number of items (minus one
            without ``X``).

        Returns
        -------
        distances : ndarray of shape (n_queries, k), dtype float64
            Distances to the neighbours, non-decreasing along each row
            (Euclidean, or ``1 - cosine similarity``).
        indices : ndarray of shape (n_queries, k), dtype int64
            Indices of the neighbours in the gallery, nearest first (their
            labels are ``labels_[indices]``).
        """
        check_is_fitted(self, "embeddings_")
        G = self.embeddings_
        if X is None:
            Q, n_candidates, what = G, G.shape[0] - 1, "the other items of the index"
        else:
            Q = self._embed(X, "X")
            self._check_width(Q, "X")
            n_candidates, what = G.shape[0], "the items of the index"
        if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}.")
        if k > n_candidates:
            fix = f"Use k <= {n_candidates}." if n_candidates else \
                "A query needs at least one other item: add items to the index."
            raise ValueError(f"k={k} is too large: each query has only {n_candidates} candidate "
                             f"neighbours ({what}). {fix}")
        if self.backend_ == "faiss":
            return self._faiss_query(Q, int(k), exclude_self=X is None)
        indices = nearest_neighbors(Q, int(k), X_ref=None if X is None else G,
                                    metric=self.metric, batch_size=self.batch_size,
                                    device=self.device)
        return pair_distances(Q, G, indices, self.metric), indices

    def _faiss_query(self, Q, k, exclude_self):
        faiss = _faiss()
        if faiss is None:
            raise ImportError("This index uses backend 'faiss', which is not installed here: "
                              "pip install faiss-cpu, or set_params(backend='exact') and refit "
                              "(or load with backend='exact').")

        def prepared(A, scale):
            A = np.array(A, dtype=np.float64)
            A = normalise_rows(A) if self.metric == "cosine" else np.ldexp(A, scale)
            return np.ascontiguousarray(A, dtype=np.float32)

        # the faiss index is built for one metric: set_params(metric=...) after a query must
        # not search the other metric's index (cosine distances came back negative)
        metric, index, scale = self.__dict__.get("_faiss_index", (None, None, 0))
        if index is None or metric != self.metric:
            d = self.embeddings_.shape[1]
            index = faiss.IndexFlatIP(d) if self.metric == "cosine" else faiss.IndexFlatL2(d)
            # Euclidean: the gallery times a power of two, its largest |x| in [0.5, 1), so
            # that float32's squared distances neither overflow (1e20) nor vanish (1e-25)
            peak = float(np.max(np.abs(self.embeddings_), initial=0.0))
            scale = -math.frexp(peak)[1] if self.metric != "cosine" and peak > 0 else 0
            index.add(prepared(self.embeddings_, scale))
            self._faiss_index = (self.metric, index, scale)
        D, indices = index.search(prepared(Q, scale), k + int(exclude_self))
        if (indices < 0).any():
            raise ValueError(
                "faiss found fewer neighbours than asked (its float32 distances of these "
                "queries overflow or are not finite); use backend='exact'.")
        if exclude_self:  # drop each item's own row (or the last, if a duplicate hid it)
            own = indices == np.arange(Q.shape[0])[:, None]
            own[~own.any(axis=1), -1] = True
            keep = ~own
            D, indices = D[keep].reshape(-1, k), indices[keep].reshape(-1, k)
        D = D.astype(np.float64)
        distances = 1.0 - D if self.metric == "cosine" else \
            np.ldexp(np.sqrt(np.maximum(D, 0.0)), -scale)
        return distances, indices.astype(np.int64)

    # ------------------------------------------------------------------ files
    def save(self, path, *, overwrite=False):
        """Write the index to ``path`` (a ``.npz`` file of arrays and JSON metadata).

        Parameters
        ----------
        path : str or path-like
            The file to write (atomically: a crash leaves either the old file
            or the new one). The name is used as given (no suffix is added).
        overwrite : bool, default=False
            Replace an existing file; otherwise a ``FileExistsError`` is raised.
        """
        check_is_fitted(self, "embeddings_")
        if not isinstance(overwrite, (bool, np.bool_)):
            raise TypeError(f"overwrite must be True or False, got {overwrite!r} (a string "
                            "such as 'False' would be true).")
        path = check_output_file(path, overwrite=overwrite, example="index.npz")
        from . import __version__

        meta = {"format": _FORMAT, "version": _VERSION, "skdml_version": __version__,
                "metric": self.metric, "backend": self.backend, "batch_size": self.batch_size,
                "transformer": (None if self.transformer is None
                                else type(self.transformer).__name__),
                # what load checks each member's declared size against before reading it
                "n_items": int(self.embeddings_.shape[0]),
                "n_dims": int(self.embeddings_.shape[1]),
                "embeddings_dtype": np.lib.format.dtype_to_descr(self.embeddings_.dtype),
                "labels_dtype": (None if self.labels_ is None
                                 else np.lib.format.dtype_to_descr(self.labels_.dtype))}
        arrays = {"embeddings": self.embeddings_, "meta": np.array(json.dumps(meta))}
        if self.labels_ is not None:
            arrays["labels"] = self.labels_
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        atomic_write_bytes(path, buffer.getvalue(), overwrite=overwrite)

    @classmethod
    def load(cls, path, *, transformer=None, **params):
        """Read an index written by :meth:`save`.

        Parameters
        ----------
        path : str or path-like
            The file.
        transformer : object with a ``transform`` method, default=None
            The fitted transformer that embedded the gallery, if one did (it is
            not stored in the file); ``None`` queries with embeddings.
        **params
            Parameters that replace the saved ones (e.g. ``backend="exact"``,
            ``device="cpu"``).

        Returns
        -------
        index : RetrievalIndex
            The fitted index.

        Raises
        ------
        ValueError
            If the file is not an index written by :meth:`save` (or is damaged).
        """
        path = os.fspath(path)

        def bad(why):
            return ValueError(f"{path!r} is not a RetrievalIndex file written by "
                              f"RetrievalIndex.save: {why}.")

        arrays, meta = _read_index_file(path, bad)
        saved = {key: meta.get(key) for key in ("metric", "backend", "batch_size")}
        index = cls(transformer=transformer, **{**saved, **params})
        index._validate_params()
        embeddings = arrays["embeddings"]
        if embeddings.ndim != 2 or embeddings.shape[0] < 1:
            raise bad(f"embeddings of dtype {embeddings.dtype} and shape {embeddings.shape}")
        try:
            embeddings = check_embeddings(embeddings, "the saved embeddings")
            labels = arrays.get("labels")
            if labels is not None:
                labels = _check_labels(labels, embeddings.shape[0], "the saved embeddings")
        except ValueError as exc:
            raise bad(str(exc)) from exc
        if meta.get("transformer") is not None and transformer is None:
            warn_user(
                f"{path!r} was built with a {meta['transformer']} that embedded the gallery; "
                "without transformer= the queries must be embeddings already. Pass "
                "transformer=<the fitted estimator> to embed them.")
        index.backend_ = index._resolve_backend()
        index.embeddings_ = embeddings
        index.labels_ = labels
        if transformer is None:  # as fit sets it
            index.n_features_in_ = embeddings.shape[1]
        elif hasattr(transformer, "n_features_in_"):
            index.n_features_in_ = transformer.n_features_in_
        return index
