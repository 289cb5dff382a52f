"""Pictures of what a learned metric does.

matplotlib is an optional dependency: it is imported when a plotting function
is called, never by ``import skdml``.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions, validate_params
from sklearn.utils.validation import check_array

from skdml.metrics import nearest_neighbors
from ._utils._params import StrictInterval

__all__ = ["plot_retrieval"]


def _import_pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "skdml.plotting needs matplotlib: pip install matplotlib "
            "(or pip install 'skdml[docs]').") from exc
    return plt


def _image_shape(n_features, image_shape):
    if image_shape is None:
        side = int(round(np.sqrt(n_features)))
        if side * side != n_features:
            raise ValueError(
                f"Cannot guess the image shape of {n_features} features (not a square); "
                "pass image_shape=(height, width).")
        return (side, side)
    if len(image_shape) not in (2, 3) or not all(
            isinstance(s, numbers.Integral) and not isinstance(s, bool) and s >= 1
            for s in image_shape) or (len(image_shape) == 3 and image_shape[2] not in (1, 3, 4)):
        raise ValueError(f"image_shape must be 2 positive integers (height, width), or 3 with "
                         "the channels last, 1, 3 (RGB) or 4 (RGBA); got "
                         f"{tuple(image_shape)!r}.")
    image_shape = tuple(int(s) for s in image_shape)
    if int(np.prod(image_shape)) != n_features:
        raise ValueError(
            f"image_shape={image_shape} holds {int(np.prod(image_shape))} pixels but the "
            f"images have {n_features} features.")
    return image_shape


@validate_params(
    {
        "images": ["array-like"],
        "query_indices": ["array-like"],
        "embeddings": [dict, None],
        "y": ["array-like", None],
        "n_neighbors": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "image_shape": [tuple, list, None],
        "metric": [StrOptions({"euclidean", "cosine"})],
        "cmap": [str],
        "ax_size": [Interval(numbers.Real, 0, None, closed="neither")],
    },
    prefer_skip_nested_validation=True,
)
def plot_retrieval(images, query_indices, *, embeddings=None, y=None, n_neighbors=5,
                   image_shape=None, metric="euclidean", cmap="gray", ax_size=1.1):
    """Show queries and their nearest neighbours under one or more embeddings.

    Each row is one query: the query image, then, for each embedding, its
    ``n_neighbors`` nearest other images, nearest first. With labels ``y``, a
    neighbour of the query's class is framed in green and any other in red, so
    raw pixels and a learned metric can be compared at a glance (for instance
    on classes never seen in training).

    Parameters
    ----------
    images : array-like of shape (n_samples, n_pixels)
        The images, one flattened image per row. They are displayed, and they
        are the ``"raw pixels"`` embedding when ``embeddings`` is None.
    query_indices : array-like of int of shape (n_queries,)
        Rows of ``images`` to use as queries. Each query searches every other
        row (itself excluded).
    embeddings : dict of str to array-like of shape (n_samples, n_dims), default=None
        Named embeddings of the same rows, shown side by side in the order
        given, e.g. ``{"raw pixels": X, "SUML": suml.transform(X)}``. ``None``
        means ``{"raw pixels": images}``.
    y : array-like of shape (n_samples,), default=None
        Labels used to frame each neighbour (green: same class as the query).
    n_neighbors : int, default=5
        Neighbours shown per query and embedding.
    image_shape : tuple of int, default=None
        Shape of one image, e.g. ``(64, 64)``; ``None`` assumes square images.
    metric : {"euclidean", "cosine"}, default="euclidean"
        How neighbours are ranked in every embedding (an exact search, see
        :func:`skdml.metrics.nearest_neighbors`).
    cmap : str, default="gray"
        Colour map for the images.
    ax_size : float, default=1.1
        Size in inches of one image in the figure.

    Returns
    -------
    fig : matplotlib.figure.Figure
        The figure. Its attribute ``neighbors_`` maps each embedding's name to
        the ``(n_queries, n_neighbors)`` indices shown.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from sklearn.datasets import load_digits
    >>> from skdml.plotting import plot_retrieval
    >>> X, y = load_digits(return_X_y=True)
    >>> fig = plot_retrieval(X[:200], [0, 1], y=y[:200], n_neighbors=3)
    >>> fig.neighbors_["raw pixels"].shape
    (2, 3)
    """
    images = check_array(images, dtype=np.float64)
    n_samples, n_pixels = images.shape
    shape = _image_shape(n_pixels, image_shape)
    queries = _check_queries(query_indices, n_samples, n_neighbors)
    if embeddings is None:
        embeddings = {"raw pixels": images}
    if not embeddings:
        raise ValueError("embeddings must name at least one embedding.")
    if y is not None:
        y = np.asarray(y)
        if y.shape != (n_samples,):
            raise ValueError(f"y has shape {y.shape}; expected ({n_samples},).")
    neighbors = {name: _neighbors_of(name, Z, n_samples, queries, n_neighbors, metric)
                 for name, Z in embeddings.items()}
    fig = _draw_retrieval(images.reshape(n_samples, *shape), queries, neighbors, y,
                          n_neighbors, cmap, ax_size)
    fig.neighbors_ = neighbors
    return fig


def _check_queries(query_indices, n_samples, n_neighbors):
    """The query rows as non-negative indices; bad indices or too many neighbours raise."""
    queries = np.asarray(query_indices)
    if queries.ndim != 1 or queries.size == 0 or not np.issubdtype(queries.dtype, np.integer):
        raise ValueError("query_indices must be a non-empty 1-D array of integer row indices.")
    if queries.min() < -n_samples or queries.max() >= n_samples:
        raise ValueError(f"query_indices must index the {n_samples} rows of images.")
    if n_neighbors > n_samples - 1:
        raise ValueError(
            f"n_neighbors={n_neighbors} is more than the {n_samples - 1} other images.")
    return queries.astype(np.intp) % n_samples  # uint8 indices: 300 overflowed the modulo


def _neighbors_of(name, Z, n_samples, queries, n_neighbors, metric):
    """The ``(n_queries, n_neighbors)`` nearest other rows of the embedding ``Z`` (exact)."""
    Z = check_array(Z, dtype=np.float64)
    if Z.shape[0] != n_samples:
        raise ValueError(f"Embedding {name!r} has {Z.shape[0]} rows; images have {n_samples}.")
    # k+1 neighbours of the whole set, then drop the query itself.
    found = nearest_neighbors(Z[queries], n_neighbors + 1, X_ref=Z, metric=metric)
    return np.stack([row[row != q][:n_neighbors] for row, q in zip(found, queries)])


def _draw_retrieval(images, queries, neighbors, y, n_neighbors, cmap, ax_size):
    """The figure: a row per query, the query then each embedding's neighbours, framed by class."""
    plt = _import_pyplot()
    # Columns: query, gap, then n_neighbors per method separated by gaps.
    widths = [1.0]
    for _ in range(len(neighbors)):
        widths += [0.25] + [1.0] * n_neighbors
    fig = plt.figure(figsize=(ax_size * sum(widths), ax_size * 1.25 * len(queries) + 0.4))
    grid = fig.add_gridspec(len(queries), len(widths), width_ratios=widths,
                            wspace=0.05, hspace=0.15)

    def show(ax, index, colour=None):
        ax.imshow(images[index], cmap=cmap)
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():
            spine.set_visible(colour is not None)
            if colour is not None:
                spine.set_edgecolor(colour)
                spine.set_linewidth(3)

    for row, q in enumerate(queries):
        ax = fig.add_subplot(grid[row, 0])
        show(ax, q)
        if row == 0:
            ax.set_title("query", fontsize=9)
        for m, (name, found) in enumerate(neighbors.items()):
            start = 1 + m * (n_neighbors + 1) + 1
            for j, index in enumerate(found[row]):
                ax = fig.add_subplot(grid[row, start + j])
                colour = None if y is None else ("tab:green" if y[index] == y[q] else "tab:red")
                show(ax, index, colour)
                if row == 0 and j == 0:
                    ax.set_title(name, fontsize=9, loc="left")
    return fig
