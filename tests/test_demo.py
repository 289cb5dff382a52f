"""Tests of the ``python -m skdml demo`` command."""

import io
import re
import subprocess
import sys

import numpy as np
import pytest
from sklearn.base import BaseEstimator, TransformerMixin

from skdml.__main__ import KS, DemoRow, demo_rows, main, run_demo
import skdml.__main__ as demo_module

ROW = re.compile(r"^\| (?P<name>.+?)\s+\|(?P<cells>( +[0-9.]+ \|)+)$")


def _table(text):
    rows = {}
    for line in text.splitlines():
        match = ROW.match(line)
        if match:
            rows[match["name"]] = [float(c) for c in match["cells"].split("|") if c.strip()]
    return rows


def test_main_demo_quick(capsys):
    assert main(["demo", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "unseen digits [5, 6, 7, 8, 9]" in out
    header = next(line for line in out.splitlines() if line.startswith("| method"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "method", "R@1", "R@2", "R@4", "R@8", "NMI", "F1", "fit (s)"]
    zero_shot, knn = out.split("k-NN (k=1) accuracy")
    rows = _table(zero_shot)
    assert list(rows) == ["raw pixels", "PCA"]  # --quick: only the fast rows, in order
    for name, cells in rows.items():
        scores, fit_s = np.array(cells[:-1]), cells[-1]
        assert scores.shape == (6,)
        assert np.all((scores >= 0) & (scores <= 1)), name
        assert np.all(np.diff(scores[:4]) >= 0), name  # Recall@K grows with K
        assert fit_s >= 0
    # Digits are easy: nearest neighbours of unseen digits are mostly right.
    assert rows["raw pixels"][0] > 0.9 and rows["PCA"][0] > 0.9
    # Second table: each row is make_pipeline(learner, KNeighborsClassifier(1)).
    accuracies = _table(knn)
    assert list(accuracies) == ["raw features", "standardized", "PCA"]  # wine: measurements
    for name, (accuracy, fit_s) in accuracies.items():
        assert 0.5 < accuracy <= 1.0 and fit_s >= 0, name
    # wine: the raw Euclidean metric is dominated by one feature; the metric matters
    assert accuracies["standardized"][0] > accuracies["raw features"][0] + 0.1


DEEP = "deep (128-d)"


def test_knn_demo_learned_metric_beats_raw_features_in_a_pipeline():
    from skdml.__main__ import run_knn_demo

    rows = [row for row in demo_rows() if row.name in ("raw pixels", DEEP)]
    out = io.StringIO()
    results = run_knn_demo(rows=rows, file=out, n_components=16)
    assert set(results) == {"raw pixels", DEEP}, out.getvalue()
    # the deep learner (defaults, in front of 1-NN) against the raw features' metric
    assert results[DEEP]["accuracy"] > results["raw pixels"]["accuracy"] + 0.1
    assert "make_pipeline(learner, KNeighborsClassifier(1))" in out.getvalue()
    assert "13-d embeddings" in out.getvalue()  # n_components capped at the 13 features


def test_run_demo_matches_metrics_and_runs_new_rows():
    """A new row is one DemoRow; its numbers are the metrics of its test embedding."""
    from skdml.metrics import clustering_f1_score, nmi_score, recall_at_k

    class Halve(TransformerMixin, BaseEstimator):
        def fit(self, X, y):
            assert len(np.unique(y)) == 5  # fitted on the training classes only
            self.fitted_ = True
            return self

        def transform(self, X):
            return X[:, ::2]

    out = io.StringIO()
    results = run_demo(rows=[DemoRow("halve", lambda n, seed: Halve())], split="random",
                       seed=3, file=out)
    assert list(results) == ["halve"]
    assert "| halve" in out.getvalue()
    from skdml.__main__ import N_INIT, _digits, _split

    X, y = _digits()
    train, test = _split(y, "random", 3)
    assert not set(y[train].tolist()) & set(y[test].tolist())
    Z, yt = X[test][:, ::2], y[test]
    expected = recall_at_k(Z, yt, k=list(KS))
    for k in KS:
        assert results["halve"][f"R@{k}"] == pytest.approx(expected[k])
    assert results["halve"]["NMI"] == pytest.approx(nmi_score(Z, yt, random_state=3,
                                                              n_init=N_INIT))
    assert results["halve"]["F1"] == pytest.approx(clustering_f1_score(Z, yt, random_state=3,
                                                                       n_init=N_INIT))


def test_optional_rows_are_skipped_not_fatal():
    def missing(n, seed):
        raise ImportError("No module named 'skdml.future'")

    def broken(n, seed):
        raise RuntimeError("diverged")

    rows = [DemoRow("raw pixels", None),
            DemoRow("future", missing, optional=True),
            DemoRow("broken", broken, optional=True)]
    out = io.StringIO()
    results = run_demo(rows=rows, file=out)
    assert list(results) == ["raw pixels"]
    text = out.getvalue()
    assert "| future       | not available: ImportError" in text
    assert "| broken       | failed: RuntimeError: diverged" in text
    # A non-optional row that fails is an error, not a silent skip.
    with pytest.raises(RuntimeError, match="diverged"):
        run_demo(rows=[DemoRow("broken", broken)], file=io.StringIO())


def test_default_rows():
    rows = demo_rows()
    names = [row.name for row in rows]
    assert names[:2] == ["raw pixels", "PCA"] and len(set(names)) == len(names)
    assert all(row.quick and not row.optional for row in rows[:2])
    assert {"SUML", "ECAML", "JRD", DEEP} <= set(names)
    assert [row.name for row in rows if row.images] == [DEEP]  # the 8x8 images, not vectors


@pytest.mark.parametrize("argv", [[], ["demo", "--n-components", "0"],
                                  ["demo", "--split", "nope"], ["train"],
                                  ["demo", "--seed", "-1"], ["demo", "--seed", "x"],
                                  ["demo", "--seed", str(2**32)]])
def test_bad_command_lines(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "usage: skdml" in capsys.readouterr().err


def test_a_bad_demo_option_shows_the_demo_usage(capsys):
    with pytest.raises(SystemExit) as info:
        main(["demo", "--n-components", "65"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert "usage: skdml demo" in err and "between 1 and 64" in err  # was the top-level usage


def test_console_script_is_declared():
    from importlib.metadata import PackageNotFoundError, entry_points

    try:
        scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    except PackageNotFoundError:  # pragma: no cover
        pytest.skip("skdml is not installed")
    if "skdml" not in scripts:  # pragma: no cover - running from a bare checkout
        pytest.skip("skdml is not installed as a distribution")
    assert scripts["skdml"] == "skdml.__main__:main"


@pytest.mark.slow
def test_python_dash_m_help():
    done = subprocess.run([sys.executable, "-m", "skdml", "demo", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert "--quick" in done.stdout


def test_module_doctests():
    """pytest's --doctest-modules skips ``__main__.py``; run its examples here."""
    import doctest
    import importlib

    module = importlib.import_module("skdml.__main__")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 5 and result.failed == 0


def test_fit_warnings_are_listed_under_the_table():
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    class Tired(TransformerMixin, BaseEstimator):
        def fit(self, X, y):
            warnings.warn("stopped at max_iter=1", ConvergenceWarning)
            return self

        def transform(self, X):
            return X

    out = io.StringIO()
    results = run_demo(rows=[DemoRow("tired", lambda n, seed: Tired())], file=out)
    assert "tired" in results
    lines = out.getvalue().splitlines()
    table_end = max(i for i, line in enumerate(lines) if line.startswith("| tired"))
    assert "  - tired: ConvergenceWarning: stopped at max_iter=1" in lines[table_end + 1:]


def test_version_flag_prints_the_installed_version(capsys):
    import skdml

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"skdml {skdml.__version__}"


class _Verbose(TransformerMixin, BaseEstimator):
    """A learner with a ``verbose`` parameter that reports progress like skdml's."""

    def __init__(self, verbose=0):
        self.verbose = verbose

    def fit(self, X, y=None):
        if self.verbose:
            print("epoch table row")  # the per-epoch table: standard output
            print("progress bar", file=sys.stderr)  # tqdm's bar: standard error
        self.fitted_verbose_ = self.verbose
        return self

    def transform(self, X):
        return X[:, :4]


def test_demo_shows_progress_on_stderr_and_keeps_its_table_clean(capsys):
    rows = [DemoRow("verbose", lambda n, seed: _Verbose())]
    out = io.StringIO()
    run_demo(rows=rows, file=out, progress=True)
    captured = capsys.readouterr()
    assert "progress bar" in captured.err  # a slow fit is visibly under way
    assert "epoch table row" not in out.getvalue() + captured.out  # the table stays clean
    assert "verbose" in _table(out.getvalue())
    run_demo(rows=rows, file=io.StringIO())  # without progress: silent, as before
    assert capsys.readouterr().err == ""


def test_deep_row_is_bounded_in_time(monkeypatch):
    """The deep row stops after the epoch that passes its wall-clock budget (issue 37)."""
    import skdml.__main__ as demo

    monkeypatch.setattr(demo, "DEEP_SECONDS", 0.0)  # every epoch passes it: stop after one
    row = next(row for row in demo_rows() if row.name == DEEP)
    out = io.StringIO()
    results = run_demo(rows=[row], file=out)
    assert DEEP in results
    assert "stopped after epoch 1 of 20, at the demo's 0 s budget" in out.getvalue()
    estimator = row.factory(16, 0)
    assert estimator.get_params()["callbacks"][0].seconds == 0.0


# audit 19 (mutation round 4): cli_helpers
def test_n_components_accepts_both_ends_of_its_range():
    assert demo_module._n_components("1") == 1
    assert demo_module._n_components("64") == 64  # load_digits' 64 pixels


def test_the_random_split_follows_the_seed():
    y = np.repeat(np.arange(10), 5)
    a, b = (demo_module._split(y, "random", seed)[0] for seed in (0, 1))
    assert not np.array_equal(np.unique(y[a]), np.unique(y[b]))
    np.testing.assert_array_equal(demo_module._split(y, "random", 0)[0], a)


def test_the_demo_digits_are_pixels_in_the_unit_interval():
    X, _ = demo_module._digits()
    assert X.min() == 0.0 and X.max() == 1.0


def test_the_clustering_scores_use_the_demo_seed(monkeypatch):
    import skdml.metrics

    seen = []
    real = skdml.metrics.clustering_scores

    def spy(*args, **kwargs):
        seen.append(kwargs["random_state"])
        return real(*args, **kwargs)

    monkeypatch.setattr(skdml.metrics, "clustering_scores", spy)
    rng = np.random.RandomState(0)
    demo_module._scores(rng.randn(40, 3), np.repeat(np.arange(4), 10), 7)
    assert seen == [7]


def test_the_time_budget_stops_after_the_first_epoch_past_it(monkeypatch):
    clock = iter([100.0, 100.5, 101.5])
    monkeypatch.setattr(demo_module.time, "perf_counter", lambda: next(clock))
    budget = demo_module._time_budget(1.0)

    class Info:
        stopped = None

        def __init__(self, epoch):
            self.epoch = epoch

        def stop(self, reason):
            Info.stopped = reason

    budget.on_train_begin(None, Info(0))
    budget.on_epoch_end(None, Info(1))  # 0.5 s: within the budget
    assert budget.stopped_after is None and Info.stopped is None
    budget.on_epoch_end(None, Info(2))  # 1.5 s: past it
    assert budget.stopped_after == 2 and "1 s budget" in Info.stopped
