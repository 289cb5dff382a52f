"""skdml.show_versions() and skdml.plotting.plot_retrieval."""

import sys

import numpy as np
import pytest
from sklearn.datasets import load_digits

import skdml
import skdml.plotting


def test_show_versions_names_every_core_dependency(capsys):
    skdml.show_versions()
    out = capsys.readouterr().out
    for name in ["python", "skdml", "numpy", "scipy", "sklearn", "pymanopt", "torch",
                 "joblib", "cuda available", "Thread pools", "OMP_WAIT_POLICY", "passive waits"]:
        assert name in out
    assert f"skdml: {skdml.__version__}" in out
    from threadpoolctl import threadpool_info
    pools = out.split("Thread pools:")[1].strip().splitlines()
    assert len(pools) == len(threadpool_info())  # one line each (two BLAS pools were one)


def test_import_skdml_does_not_import_matplotlib():
    import subprocess
    code = "import sys, skdml, skdml.plotting; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


@pytest.fixture(scope="module")
def digits():
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    X, y = load_digits(return_X_y=True)
    return X[:300], y[:300]


def test_plot_retrieval_shows_exact_neighbours_side_by_side(digits):
    import matplotlib.pyplot as plt
    X, y = digits
    rng = np.random.RandomState(0)
    learned = X @ rng.randn(64, 10)
    fig = plot = skdml.plotting.plot_retrieval(
        X, [3, 7, 11], embeddings={"raw pixels": X, "learned": learned}, y=y, n_neighbors=4)
    assert plot.neighbors_.keys() == {"raw pixels", "learned"}
    for name, Z in [("raw pixels", X), ("learned", learned)]:
        found = fig.neighbors_[name]
        assert found.shape == (3, 4)
        for row, q in zip(found, [3, 7, 11]):
            d = ((Z - Z[q]) ** 2).sum(axis=1)
            d[q] = np.inf                                   # the query never retrieves itself
            np.testing.assert_array_equal(row, np.argsort(d, kind="stable")[:4])
    # 3 rows x (1 query + 2 x 4 neighbours) image axes, each showing one image.
    assert len(fig.axes) == 3 * (1 + 2 * 4)
    assert all(len(ax.images) == 1 for ax in fig.axes)
    # Frames: green for the query's class, red otherwise.
    first_neighbour = fig.axes[1]
    same = y[fig.neighbors_["raw pixels"][0, 0]] == y[3]
    colour = first_neighbour.spines["left"].get_edgecolor()
    import matplotlib.colors as mcolors
    assert mcolors.to_hex(colour) == mcolors.to_hex("tab:green" if same else "tab:red")
    plt.close(fig)


@pytest.mark.parametrize("kwargs, match", [
    ({"query_indices": [1000]}, "index"),
    ({"query_indices": [[1, 2]]}, "1-D"),
    ({"n_neighbors": 300}, "other images"),
    ({"image_shape": (7, 7)}, "pixels"),
    ({"image_shape": (8.5, 8)}, "positive integers"),
    ({"image_shape": (-8, -8)}, "positive integers"),
    ({"image_shape": (64,)}, "positive integers"),
    ({"image_shape": (4, 8, 2)}, "channels last"),
    ({"embeddings": {"bad": np.zeros((5, 2))}}, "rows"),
    ({"y": np.zeros(3)}, "shape"),
])
def test_plot_retrieval_refuses_bad_input(digits, kwargs, match):
    X, y = digits
    args = {"query_indices": [0]} | kwargs
    with pytest.raises(ValueError, match=match):
        skdml.plotting.plot_retrieval(X, **args)


def test_plot_retrieval_takes_small_unsigned_query_indices(digits):
    import matplotlib.pyplot as plt
    X, y = digits  # uint8 indices: "Python integer 300 out of bounds for uint8" in the modulo
    fig = skdml.plotting.plot_retrieval(X[:300], np.array([5], dtype=np.uint8), y=y[:300])
    plt.close(fig)


def test_plot_retrieval_needs_square_or_given_shape(digits):
    X, _ = digits
    with pytest.raises(ValueError, match="image_shape"):
        skdml.plotting.plot_retrieval(X[:, :60], [0])


# audit 19 (mutation round 4): missing_and_unversioned
def test_a_missing_dependency_is_listed_as_none_and_one_without_version_as_unknown(
        monkeypatch):
    import importlib
    import types

    from skdml import _show_versions

    def fake(name):
        if name == "missing_dependency":
            raise ImportError(name)
        if name == "unversioned_dependency":
            return types.ModuleType(name)
        return importlib.import_module(name)

    monkeypatch.setattr(_show_versions, "_DEPENDENCIES",
                        ("numpy", "missing_dependency", "unversioned_dependency"))
    monkeypatch.setattr(_show_versions, "importlib", types.SimpleNamespace(import_module=fake))
    assert _show_versions._dependency_versions() == {
        "numpy": np.__version__, "missing_dependency": None, "unversioned_dependency": "unknown"}


# audit 19 (mutation round 4): negative_query


def test_a_negative_query_index_is_the_same_query_as_its_positive_index(digits):
    import matplotlib.pyplot as plt
    X, y = digits
    negative = skdml.plotting.plot_retrieval(X, [-1], y=y, n_neighbors=3)
    positive = skdml.plotting.plot_retrieval(X, [299], y=y, n_neighbors=3)
    for name in positive.neighbors_:
        np.testing.assert_array_equal(negative.neighbors_[name], positive.neighbors_[name])
        assert 299 not in negative.neighbors_[name]  # the query never retrieves itself
    plt.close(negative)
    plt.close(positive)
