"""Command line entry point: ``python -m skdml demo`` (or the ``skdml demo`` script).

The demo learns a metric on half of the classes of scikit-learn's bundled
``load_digits`` and measures it on the other, unseen half (the zero-shot
protocol of the papers): Recall@1/2/4/8 of the test samples among themselves,
and NMI and pairwise F1 of a k-means clustering of them, one row per method.

Adding a learner to the demo is one line in :func:`demo_rows`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import io
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

__all__ = ["main", "run_demo", "run_knn_demo", "demo_rows", "DemoRow"]

KS = (1, 2, 4, 8)
#: k-means restarts for NMI and F1 (one restart is too noisy to compare rows).
N_INIT = 10
#: The deep row's epoch budget (a fraction of its default), so that the demo takes
#: minutes, not tens of minutes, on two cores.
DEEP_EPOCHS = 20
#: And its wall-clock bound: training stops after the epoch that passes it, so that the
#: demo takes a few minutes at most on a slow or busy machine (a note says so).
DEEP_SECONDS = 60.0


@dataclass(frozen=True)
class DemoRow:
    """One method of the demo table.

    Parameters
    ----------
    name : str
        Row label.
    factory : callable or None
        ``factory(n_components, random_state)`` returns an unfitted transformer
        (fitted on the training classes with their labels); ``None`` means the
        raw pixels, no fitting.
    quick : bool, default=True
        Whether the row runs under ``--quick``.
    optional : bool, default=False
        An optional row that cannot be imported or fails is reported and
        skipped instead of stopping the demo.
    images : bool, default=False
        The digits demo gives this row the 8x8 images ``(n, 8, 8)`` instead of
        the 64 pixels as a vector (the k-NN demo's wine data are vectors for all).
    """

    name: str
    factory: Optional[Callable[[int, int], object]]
    quick: bool = True
    optional: bool = False
    images: bool = False


def _pca(n_components, random_state):
    from sklearn.decomposition import PCA

    return PCA(n_components=n_components, random_state=random_state)


def _skdml(module, class_name, **params):
    """Factory for one of skdml's learners, imported only when the row runs."""

    def factory(n_components, random_state):
        cls = getattr(importlib.import_module(module), class_name)
        return cls(n_components=n_components, random_state=random_state, **params)

    return factory


def demo_rows(unseen_classes=True):
    """The methods compared by the demo, in table order.

    ``unseen_classes=True`` (the zero-shot table) sets ECAML and JRD for retrieval of
    classes never seen in training (``validation_split="class_disjoint"``); ``False``
    (the k-NN table) keeps their default task, k-NN on the training classes.

    Returns
    -------
    rows : list of DemoRow
        Raw pixels and PCA always; skdml's learners as optional rows (they
        run in the full demo, not under ``--quick``, and a learner that is not
        available is reported and skipped).

    Examples
    --------
    >>> from skdml.__main__ import demo_rows
    >>> [row.name for row in demo_rows()][:2]
    ['raw pixels', 'PCA']
    """
    task = {"validation_split": "class_disjoint"} if unseen_classes else {}
    return [
        DemoRow("raw pixels", None),
        DemoRow("PCA", _pca),
        DemoRow("SUML", _skdml("skdml.linear", "SUML"), quick=False, optional=True),
        DemoRow("ECAML", _skdml("skdml.linear", "ECAML", **task), quick=False, optional=True),
        DemoRow("JRD", _skdml("skdml.linear", "JRD", **task), quick=False, optional=True),
        DemoRow("deep (128-d)", _deep, quick=False, optional=True, images=True),
    ]


class _TimeBudget:
    """A training callback that stops a fit after the epoch that passes ``seconds`` of wall time.

    Created lazily as a :class:`skdml.callbacks.Callback` (see :func:`_time_budget`).
    """


def _time_budget(seconds):
    """A :class:`skdml.callbacks.Callback` bounding a fit's training to about ``seconds``."""
    from .callbacks import Callback

    class TimeBudget(Callback, _TimeBudget):
        def __init__(self, seconds):
            self.seconds = seconds
            self.stopped_after = None  # the epoch it stopped after, if it did

        def on_train_begin(self, estimator, info):
            self._start = time.perf_counter()

        def on_epoch_end(self, estimator, info):
            if time.perf_counter() - self._start > self.seconds:
                self.stopped_after = info.epoch
                info.stop(f"the demo's {self.seconds:.0f} s budget for this row")

    return TimeBudget(seconds)


def _deep(n_components, random_state):
    """The deep learner with its own default dimension (128) and a demo-sized budget.

    Its embedding width matters more than a linear map's (on the unseen digits
    it loses Recall@1 at 16-d and 64-d), so it keeps its default; the row's
    label says the dimension. At most :data:`DEEP_EPOCHS` epochs, and training
    stops after the epoch that passes :data:`DEEP_SECONDS` of wall time.
    """
    from .deep import DeepMetricTransformer

    return DeepMetricTransformer(max_iter=DEEP_EPOCHS, random_state=random_state,
                                 callbacks=[_time_budget(DEEP_SECONDS)])


def _budget_note(row, estimator):
    """The note for a row whose time budget stopped its training, else None."""
    params = estimator.get_params(deep=False) if hasattr(estimator, "get_params") else {}
    for callback in params.get("callbacks") or ():
        if isinstance(callback, _TimeBudget) and callback.stopped_after is not None:
            return (f"{row.name}: stopped after epoch {callback.stopped_after} of "
                    f"{params.get('max_iter')}, at the demo's {callback.seconds:.0f} s budget "
                    "for this row (a slow or busy machine); its scores are those of a "
                    "shorter training")
    return None


def _standardized(n_components, random_state):
    from sklearn.preprocessing import StandardScaler

    return StandardScaler()


def _digits():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X / 16.0, y  # pixels in [0, 1], like skdml.datasets


def _split(y, split, seed):
    from .model_selection import ClassDisjointSplit, FirstHalfClassSplit

    if split == "first-half":
        cv = FirstHalfClassSplit()
    else:
        cv = ClassDisjointSplit(n_splits=1, test_size=0.5, random_state=seed)
    return next(cv.split(None, y))


def _scores(Z, y, seed):
    from .metrics import clustering_scores, recall_at_k

    recalls = recall_at_k(Z, y, k=list(KS))
    # One k-means for both NMI and F1 (same as nmi_score and clustering_f1_score).
    clusters = clustering_scores(Z, y, random_state=seed, n_init=N_INIT)
    return {
        **{f"R@{k}": float(recalls[k]) for k in KS},
        "NMI": float(clusters["nmi"]),
        "F1": float(clusters["f1"]),
    }


def run_demo(*, quick=False, seed=0, split="first-half", n_components=16, rows=None,
             file=None, progress=False):
    """Run the zero-shot demo on ``load_digits`` and print its table.

    Parameters
    ----------
    quick : bool, default=False
        Run only the rows marked ``quick`` (raw pixels and PCA).
    seed : int, default=0
        Seed of the learners, of k-means and of a random split.
    split : {"first-half", "random"}, default="first-half"
        ``"first-half"``: digits 0-4 train, 5-9 test
        (:class:`~skdml.model_selection.FirstHalfClassSplit`); ``"random"``:
        five random classes train
        (:class:`~skdml.model_selection.ClassDisjointSplit`).
    n_components : int, default=16
        Embedding dimension of the learned rows.
    rows : list of DemoRow, default=None
        Methods to compare; ``None`` uses :func:`demo_rows`.
    file : file-like, default=None
        Where to print; ``None`` is ``sys.stdout``.
    progress : bool, default=False
        Show a progress bar (on standard error) while each learner with a
        ``verbose`` parameter fits, so a slow fit is visibly under way.

    Returns
    -------
    results : dict
        ``{row name: {"R@1": ..., "R@2": ..., "R@4": ..., "R@8": ..., "NMI": ...,
        "F1": ..., "fit_s": ...}}`` for the rows that ran.

    Examples
    --------
    >>> import io
    >>> from skdml.__main__ import run_demo
    >>> from skdml.__main__ import DemoRow
    >>> from sklearn.decomposition import PCA
    >>> rows = [DemoRow("PCA-8", lambda n, seed: PCA(8, random_state=seed))]
    >>> results = run_demo(rows=rows, file=io.StringIO())
    >>> sorted(results["PCA-8"])
    ['F1', 'NMI', 'R@1', 'R@2', 'R@4', 'R@8', 'fit_s']
    >>> all(0.0 <= results["PCA-8"][key] <= 1.0 for key in ("R@1", "NMI", "F1"))
    True
    """
    out = sys.stdout if file is None else file
    rows = demo_rows() if rows is None else rows
    X, y = _digits()
    train, test = _split(y, split, seed)
    print(f"skdml demo: load_digits ({X.shape[0]} images, {X.shape[1]} pixels), "
          f"zero-shot split '{split}'", file=out)
    print(f"  fit on digits {sorted(set(y[train].tolist()))} ({len(train)} images); "
          f"scored on unseen digits {sorted(set(y[test].tolist()))} ({len(test)} images)",
          file=out)
    print(f"  Recall@K among the test images; NMI and F1 of k-means ({N_INIT} restarts) with "
          f"{len(set(y[test].tolist()))} clusters; {n_components}-d embeddings (the deep row: "
          f"its default 128-d, from the 8x8 images, {DEEP_EPOCHS} epochs)\n", file=out)

    columns = [f"R@{k}" for k in KS] + ["NMI", "F1"]
    header = f"| {'method':<12} | " + " | ".join(f"{c:>5}" for c in columns) + " | fit (s) |"
    print(header, file=out)
    print("|" + "|".join("-" * len(cell) for cell in header.split("|")[1:-1]) + "|",
          file=out)
    out.flush()

    results, notes = {}, []
    images = X.reshape(-1, 8, 8)  # the rows with ``images=True`` see these
    for row in rows:
        if quick and not row.quick:
            continue
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                X_row = images if row.images else X
                if row.factory is None:
                    Z = X_row[test]
                else:
                    estimator = row.factory(n_components, seed)  # imports happen here
                    t0 = time.perf_counter()
                    _fit(estimator, X_row[train], y[train], progress)
                    Z = estimator.transform(X_row[test])
                    budget = _budget_note(row, estimator)
                    if budget is not None and budget not in notes:
                        notes.append(budget)
        except Exception as exc:  # noqa: BLE001 - optional rows must not stop the demo
            if not row.optional:
                raise
            reason = "not available" if isinstance(exc, ImportError) else "failed"
            print(f"| {row.name:<12} | {reason}: {type(exc).__name__}: {exc}"[:200], file=out)
            continue
        fit_s = time.perf_counter() - t0
        for w in caught:  # reported under the table rather than mixed into it
            if issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning)):
                continue
            message = str(w.message).splitlines()[0] if str(w.message) else ""
            note = f"{row.name}: {w.category.__name__}: {message}"
            if note not in notes:
                notes.append(note)
        scores = _scores(np.asarray(Z, dtype=np.float64), y[test], seed)
        results[row.name] = {**scores, "fit_s": fit_s}
        print(f"| {row.name:<12} | " + " | ".join(f"{scores[c]:5.3f}" for c in columns)
              + f" | {fit_s:7.3f} |", file=out)
        out.flush()
    if notes:
        print("\nnotes (demo settings are small on purpose):", file=out)
        for note in notes:
            print(f"  - {note}", file=out)
    return results


def _fit(estimator, X, y, progress):
    """Fit; with ``progress``, a learner's progress bar goes to standard error.

    ``verbose=1`` also prints one table row per epoch on standard output; those
    rows are dropped so the demo's own table stays readable.
    """
    if not (progress and "verbose" in estimator.get_params()):
        return estimator.fit(X, y)
    estimator.set_params(verbose=1)
    with contextlib.redirect_stdout(io.StringIO()):
        return estimator.fit(X, y)


def run_knn_demo(*, quick=False, seed=0, n_components=16, rows=None, file=None):
    """k-NN classification on ``load_wine`` with each learner in a ``Pipeline``.

    The wine measurements have units from 0.1 to 1000, so the Euclidean
    distance of the raw features is dominated by one of them: a data set where
    the metric matters. A stratified 70/30 split of the three cultivars; each
    row is ``make_pipeline(learner, KNeighborsClassifier(1))`` fitted on the
    training part and scored (accuracy) on the test part. Raw features use the
    classifier alone; the "standardized" row (``StandardScaler``, nothing
    learned from the labels) is the bar a learned metric has to clear.

    Parameters
    ----------
    quick, seed, rows, file
        As in :func:`run_demo`.
    n_components : int, default=16
        Embedding dimension, at most 13 (the number of wine features).

    Returns
    -------
    results : dict
        ``results[name] = {"accuracy": float, "fit_s": float}``.

    Examples
    --------
    >>> import io
    >>> from sklearn.decomposition import PCA
    >>> from skdml.__main__ import DemoRow, run_knn_demo
    >>> rows = [DemoRow("PCA-8", lambda n, seed: PCA(8, random_state=seed))]
    >>> results = run_knn_demo(rows=rows, file=io.StringIO())
    >>> 0.5 < results["PCA-8"]["accuracy"] <= 1.0
    True
    """
    from sklearn.datasets import load_wine
    from sklearn.model_selection import train_test_split
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline

    out = sys.stdout if file is None else file
    if rows is None:  # the wine data are measurements: the factory-less row is "raw features"
        rows = [dataclasses.replace(row, name="raw features") if row.factory is None else row
                for row in demo_rows(unseen_classes=False)]
        rows.insert(1, DemoRow("standardized", _standardized))
    X, y = load_wine(return_X_y=True)
    n_components = min(n_components, X.shape[1])
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, stratify=y,
                                              random_state=seed)
    print(f"\nk-NN (k=1) accuracy on load_wine ({X.shape[0]} wines, {X.shape[1]} features in "
          f"units from 0.1 to 1000), each learner in make_pipeline(learner, "
          f"KNeighborsClassifier(1)); stratified 70/30 split; {n_components}-d embeddings\n",
          file=out)
    print(f"| {'method':<12} | accuracy | fit (s) |", file=out)
    print(f"|{'-' * 14}|{'-' * 10}|{'-' * 9}|", file=out)
    results, notes = {}, []
    for row in rows:
        if quick and not row.quick:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # fit warnings are listed by run_demo
                steps = [] if row.factory is None else [row.factory(n_components, seed)]
                model = make_pipeline(*steps, KNeighborsClassifier(1))
                t0 = time.perf_counter()
                model.fit(X_tr, y_tr)
                fit_s = time.perf_counter() - t0
                accuracy = float(model.score(X_te, y_te))
        except Exception as exc:  # noqa: BLE001 - optional rows must not stop the demo
            if not row.optional:
                raise
            print(f"| {row.name:<12} | failed: {type(exc).__name__}: {exc}"[:200], file=out)
            continue
        results[row.name] = {"accuracy": accuracy, "fit_s": fit_s}
        print(f"| {row.name:<12} | {accuracy:8.3f} | {fit_s:7.3f} |", file=out)
        out.flush()
        if steps:
            note = _budget_note(row, steps[0])
            if note is not None:
                notes.append(note)
    if notes:
        print("\nnotes:", file=out)
        for note in notes:
            print(f"  - {note}", file=out)
    return results


def _seed(text):
    """``--seed``: an integer numpy accepts as a seed, else an argparse error (no traceback)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: not an integer") from None
    if not 0 <= value <= 2**32 - 1:
        raise argparse.ArgumentTypeError(f"invalid seed {value}: must be in [0, 2**32 - 1]")
    return value


def _n_components(text):
    """``--n-components``: 1 to 64 (load_digits has 64 pixels), else an argparse error of the
    ``demo`` command (its usage, exit code 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: not an integer") from None
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(
            f"invalid value {value}: must be between 1 and 64 (load_digits has 64 pixels)")
    return value


def main(argv=None):
    """Run the ``skdml`` command line.

    Parameters
    ----------
    argv : list of str, default=None
        Arguments; ``None`` reads ``sys.argv[1:]``.

    Returns
    -------
    status : int
        0 on success.

    Examples
    --------
    >>> from skdml.__main__ import main
    >>> main(["demo", "--quick"])  # doctest: +ELLIPSIS
    skdml demo: load_digits (1797 images, 64 pixels), zero-shot split 'first-half'
    ...
    | raw pixels   | ...
    | PCA          | ...
    0
    """
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="skdml", description="skdml: scikit-learn compatible distance metric learning.")
    parser.add_argument("--version", action="version", version=f"skdml {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="zero-shot retrieval/clustering table on scikit-learn's load_digits",
        description="Learn on half of the digit classes, score Recall@1/2/4/8, NMI and F1 "
                    "on the unseen other half, for raw pixels, PCA and skdml's learners; "
                    "then k-NN classification of load_wine's classes with each learner in "
                    "a Pipeline (the --quick run too).")
    demo.add_argument("--quick", action="store_true",
                      help="only the fast rows: raw features and PCA (and, on wine, "
                           "standardisation)")
    demo.add_argument("--seed", type=_seed, default=0,
                      help="random seed, an integer in [0, 2**32 - 1] (default 0)")
    demo.add_argument("--split", choices=["first-half", "random"], default="first-half",
                      help="digits 0-4 train (default) or 5 random training digits")
    demo.add_argument("--n-components", type=_n_components, default=16,
                      help="embedding dimension of the learned rows, 1 to 64 (default 16)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        run_demo(quick=args.quick, seed=args.seed, split=args.split,
                 n_components=args.n_components, progress=True)
        run_knn_demo(quick=args.quick, seed=args.seed, n_components=args.n_components)
    return 0


if __name__ == "__main__":
    sys.exit(main())
