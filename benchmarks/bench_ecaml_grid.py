"""ECAML tuned for closed-set k-NN by a small grid search, against its defaults and the rivals.

The linear comparison's protocol (``compare_linear.py``), on the same splits:

* ``StratifiedShuffleSplit(n_splits=3, test_size=0.3, random_state=0)``;
* pixels in [0, 1]; AT&T and COIL-20 reduced by PCA-100 fitted on the training split;
* 64 components; k-NN test accuracy % at k=1 and k=10 (mean over the splits).

Per outer split, one ``GridSearchCV`` over :data:`GRID` (one fixed grid for every data
set) sees the training split only: a ``Pipeline(ECAML, KNeighborsClassifier)`` scored by
``StratifiedKFold(5, shuffle=True, random_state=0)``, once for each k (the 1-NN score
chooses the k=1 model, the 10-NN score the k=10 model). Both scores come from the same
inner fits (a multi-metric search, :func:`knn_scorer`), which is what two searches with
``KNeighborsClassifier(1)`` and ``KNeighborsClassifier(10)`` compute, at half the cost.
The chosen candidate is refitted on the whole training split and scored on the test
split. The rows:

* ``PCA-64`` and ``ECAML defaults`` (``ECAML(64, random_state=0)``), fitted here;
* ``ECAML grid-searched``, with the candidate chosen per split and k;
* the best rival per cell (sklearn NCA, metric-learn LMNN / ITML), read from
  ``results/linear_comparison_rivals.json`` (``--rivals``): metric-learn needs its own
  scikit-learn 1.7 environment (``compare_linear.py`` builds it), and these fits are not
  repeated here.

Times are CPU seconds on one thread (``time.process_time``): the search (every inner
fit) plus the two refits, per split.

Usage::

    python benchmarks/bench_ecaml_grid.py                        # AT&T and COIL-20
    python benchmarks/bench_ecaml_grid.py --datasets att coil20 usps
    python benchmarks/bench_ecaml_grid.py --quick                # smoke run, own files

Writes ``results/ecaml_grid.{md,json,png}`` (``--quick``: ``*_quick.*``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("SKDML_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from sklearn.base import clone
from sklearn.decomposition import PCA
from sklearn.model_selection import (
    GridSearchCV,
    StratifiedKFold,
)
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, markdown_table, save
from compare_linear import prepare  # the bar protocol's splits, one definition

from skdml import ECAML

NAMES = {"att": "AT&T", "coil20": "COIL-20", "usps": "USPS"}
KS = (1, 10)
#: The documented grid (``doc/tuning_linear.md``): 10 candidates, the same for every data
#: set. Fixed for all: the k-NN batch plan (8 classes x 16 samples). Axes: the loss, and
#: early stopping on a stratified hold-out (refit on all the data) or none.
GRID = {
    "ecaml__loss": ["lmnn", "npair", "multisimilarity", "binomial", "triplet"],
    "ecaml__early_stopping": [True, False],
}
FIXED = {"n_classes_per_batch": 8, "n_samples_per_class": 16, "validation_split": "stratified"}
#: The smoke run's grid and budget.
QUICK_GRID = {"ecaml__loss": ["lmnn", "binomial"], "ecaml__early_stopping": [False]}
QUICK_FIXED = {**FIXED, "max_iter": 5}


def knn_scorer(k):
    """Scorer: accuracy of the pipeline's k-NN step with ``n_neighbors=k``.

    ``KNeighborsClassifier`` reads ``n_neighbors`` when it predicts, so one fitted
    pipeline gives the accuracy at every k (its ``n_neighbors`` is put back after).
    """
    def score(pipe, X, y):
        knn = pipe[-1]
        old = knn.n_neighbors
        knn.n_neighbors = k
        try:
            return pipe.score(X, y)
        finally:
            knn.n_neighbors = old
    score.__name__ = f"knn{k}_accuracy"
    return score


def make_search(n_components, folds, grid, fixed):
    pipe = Pipeline([("ecaml", ECAML(n_components, random_state=0, **fixed)),
                     ("knn", KNeighborsClassifier(KS[0]))])
    return GridSearchCV(pipe, grid, cv=StratifiedKFold(folds, shuffle=True, random_state=0),
                        scoring={f"k{k}": knn_scorer(k) for k in KS}, refit=False, n_jobs=1,
                        error_score="raise")


def knn_scores(Z_train, y_train, Z_test, y_test, ks=KS):
    return {k: float(KNeighborsClassifier(k).fit(Z_train, y_train).score(Z_test, y_test))
            for k in ks}


def timed_fit(est, X, y):
    c0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning of short --quick fits
        est.fit(X, y)
    return time.process_time() - c0


def short(params):
    """``{"ecaml__loss": "lmnn", "ecaml__early_stopping": True}`` -> ``lmnn, ES``."""
    p = {key.split("__", 1)[1]: value for key, value in params.items()}
    text = [str(p.pop("loss"))] if "loss" in p else []
    if "early_stopping" in p:
        text.append("ES" if p.pop("early_stopping") else "no ES")
    text += [f"{key}={value}" for key, value in p.items()]
    return ", ".join(text)


def best_rivals(path, name, n_splits):
    """``{k: (mean accuracy, method)}``: the best rival per k, and PCA's reused numbers, over
    the first ``n_splits`` splits (the ones this run uses: a quick run has one)."""
    data = json.loads(Path(path).read_text())["results"].get(name, {})
    best, pca = {}, None
    for method, r in data.items():
        if not r["acc"]["1"]:
            continue  # timed out
        means = {k: float(np.mean(r["acc"][str(k)][:n_splits])) for k in KS}
        if method.startswith("PCA"):
            pca = means
            continue
        for k in KS:
            if k not in best or means[k] > best[k][0]:
                best[k] = (means[k], method)
    return best, pca


def run_dataset(name, args):
    grid, fixed = (QUICK_GRID, QUICK_FIXED) if args.quick else (GRID, FIXED)
    splits = prepare(name, args.n_splits, args.reduce_dims)
    rows = {m: {"acc": {k: [] for k in KS}, "cpu_s": []} for m in ("pca", "defaults", "tuned")}
    rows["tuned"].update(chosen={k: [] for k in KS}, inner={k: [] for k in KS}, search_s=[])
    candidates = None
    for s, (X_train, y_train, X_test, y_test) in enumerate(splits):
        # PCA and the defaults
        for key, est in (("pca", PCA(args.n_components, random_state=0)),
                         ("defaults", ECAML(args.n_components, random_state=0,
                                            **({"max_iter": 5} if args.quick else {})))):
            rows[key]["cpu_s"].append(timed_fit(est, X_train, y_train))
            acc = knn_scores(est.transform(X_train), y_train, est.transform(X_test), y_test)
            for k in KS:
                rows[key]["acc"][k].append(acc[k])
        # the search on the training split, then one refit per k
        search = make_search(args.n_components, args.folds, grid, fixed)
        search_s = timed_fit(search, X_train, y_train)
        res = search.cv_results_
        candidates = [short(p) for p in res["params"]]
        refit_s = 0.0
        mean_score = np.mean([res[f"mean_test_k{k}"] for k in KS], axis=0)
        for k in KS:
            # per k: the candidate of the best inner k-NN accuracy at that k (the first on a
            # tie, as GridSearchCV); --choose mean: one candidate for both, the best mean
            best = int(np.argmin(res[f"rank_test_k{k}"]) if args.choose == "per-k"
                       else np.argmax(mean_score))
            pipe = clone(search.estimator).set_params(**res["params"][best])
            pipe.set_params(knn__n_neighbors=k)
            refit_s += timed_fit(pipe, X_train, y_train)
            acc = float(pipe.score(X_test, y_test))
            rows["tuned"]["acc"][k].append(acc)
            rows["tuned"]["chosen"][k].append(short(res["params"][best]))
            rows["tuned"]["inner"][k].append([float(v) for v in res[f"mean_test_k{k}"]])
            print(f"  {name} split {s} k={k}: chose {short(res['params'][best])} "
                  f"(inner {res[f'mean_test_k{k}'][best] * 100:.1f}), test {acc * 100:.1f}",
                  flush=True)
        rows["tuned"]["search_s"].append(search_s)
        rows["tuned"]["cpu_s"].append(search_s + refit_s)
        print(f"  {name} split {s}: PCA {rows['pca']['acc'][1][-1] * 100:.1f}/"
              f"{rows['pca']['acc'][10][-1] * 100:.1f}, defaults "
              f"{rows['defaults']['acc'][1][-1] * 100:.1f}/"
              f"{rows['defaults']['acc'][10][-1] * 100:.1f}, search {search_s:.0f} CPU s",
              flush=True)
    rows["tuned"]["candidates"] = candidates
    return rows


def pct(values):
    return f"{np.mean(values) * 100:.1f}"


def seconds(values):
    v = float(np.median(values))
    return f"{v:.2g} s" if v < 10 else f"{v:.0f} s"


def plot(results, rivals, datasets):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["PCA-64", "ECAML defaults", "ECAML grid-searched", "best rival"]
    colors = ["0.75", "tab:blue", "tab:green", "tab:red"]
    cells = [(name, k) for name in datasets for k in KS]
    fig, ax = plt.subplots(figsize=(1.6 + 1.9 * len(cells), 3.4))
    width = 0.2
    for i, label in enumerate(labels):
        values = []
        for name, k in cells:
            if label == "best rival":
                values.append(rivals[name][0][k][0] * 100 if k in rivals[name][0] else np.nan)
            else:
                key = {"PCA-64": "pca", "ECAML defaults": "defaults",
                       "ECAML grid-searched": "tuned"}[label]
                values.append(np.mean(results[name][key]["acc"][k]) * 100)
        ax.bar(np.arange(len(cells)) + (i - 1.5) * width, values, width, label=label,
               color=colors[i])
    ax.set_xticks(np.arange(len(cells)))
    ax.set_xticklabels([f"{NAMES[name]}\nk={k}" for name, k in cells])
    ax.set_ylim(60, 101)
    ax.set_ylabel("k-NN test accuracy %")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=None, choices=list(NAMES),
                        help="data sets (default: att coil20; --quick: att)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: AT&T, 1 split, 2 candidates, 5 epochs; own files")
    parser.add_argument("--n-splits", type=int, default=3, help="outer splits (default 3)")
    parser.add_argument("--folds", type=int, default=5,
                        help="inner StratifiedKFold folds (default 5)")
    parser.add_argument("--choose", choices=["per-k", "mean"], default="per-k",
                        help="per-k (default): one choice per k by its inner accuracy; mean: "
                             "one choice for both k by the mean of the two")
    parser.add_argument("--n-components", type=int, default=64)
    parser.add_argument("--reduce-dims", type=int, default=100,
                        help="PCA reduction of AT&T and COIL-20 (default 100)")
    parser.add_argument("--rivals", default=str(RESULTS / "linear_comparison_rivals.json"),
                        help="the rivals' results (compare_linear.py) to reuse")
    parser.add_argument("--name", default="ecaml_grid", help="result file name")
    args = parser.parse_args(argv)
    if args.datasets is None:
        args.datasets = ["att"] if args.quick else ["att", "coil20"]
    if args.quick:
        args.n_splits = min(args.n_splits, 1)
        args.folds = min(args.folds, 3)

    t0 = time.perf_counter()
    results, rivals = {}, {}
    with threadpool_limits(1):
        for name in args.datasets:
            print(f"{NAMES[name]} ...", flush=True)
            results[name] = run_dataset(name, args)
            rivals[name] = best_rivals(args.rivals, name, args.n_splits)
    total = time.perf_counter() - t0

    grid = QUICK_GRID if args.quick else GRID
    fixed = QUICK_FIXED if args.quick else FIXED
    n_cand = int(np.prod([len(v) for v in grid.values()]))
    header = ["data set", "k", "PCA-64", "ECAML defaults", "ECAML grid-searched",
              "best rival (reused)", "tuned >= rival", "chosen per split"]
    table, verdicts = [], []
    for name in args.datasets:
        r = results[name]
        best, _ = rivals[name]
        for k in KS:
            rival, method = best.get(k, (np.nan, "none"))
            tuned = float(np.mean(r["tuned"]["acc"][k]))
            # the means as printed (one decimal), as the tables compare them
            ok = round(tuned * 100, 1) >= round(rival * 100, 1)
            verdicts.append(ok)
            table.append([NAMES[name], k, pct(r["pca"]["acc"][k]), pct(r["defaults"]["acc"][k]),
                          pct(r["tuned"]["acc"][k]), f"{rival * 100:.1f} ({method})",
                          "yes" if ok else "**no**", "; ".join(r["tuned"]["chosen"][k])])
    times = markdown_table(
        ["data set", "PCA-64", "ECAML defaults",
         f"grid search ({n_cand} candidates x {args.folds} folds) + 2 refits"],
        [[NAMES[n], seconds(results[n]["pca"]["cpu_s"]), seconds(results[n]["defaults"]["cpu_s"]),
          seconds(results[n]["tuned"]["cpu_s"])] for n in args.datasets])
    grid_text = ", ".join(f"`{key.split('__', 1)[1]}` in {values}" for key, values in grid.items())
    fixed_text = ", ".join(f"`{key}={value!r}`" for key, value in fixed.items())
    md = (
        "## ECAML grid-searched for closed-set k-NN\n\n"
        f"{args.n_splits} x `StratifiedShuffleSplit(test_size=0.3, random_state=0)`; pixels in "
        f"[0, 1]; AT&T and COIL-20 reduced by PCA-{args.reduce_dims} fitted on the training "
        f"split; {args.n_components} components. k-NN test accuracy % (mean over the splits). "
        f"Grid ({n_cand} candidates): {grid_text}; fixed: {fixed_text}, `random_state=0`. "
        f"Per split, `GridSearchCV(Pipeline(ECAML, KNeighborsClassifier(k)))` with "
        f"`StratifiedKFold({args.folds}, shuffle=True, random_state=0)` on the training split "
        "only, "
        + ("one choice per k (its inner k-NN accuracy)" if args.choose == "per-k" else
           "one choice for both k (the mean of the inner 1-NN and 10-NN accuracies)")
        + ", refitted on the training split. "
        "Rivals (sklearn NCA, metric-learn LMNN and ITML) reused from "
        f"`{Path(args.rivals).name}` (same splits).\n\n"
        + markdown_table(header, table)
        + "\n\nMedian CPU seconds per split (one thread):\n\n" + times
        + f"\n\nReaches the best rival on {sum(verdicts)} of {len(verdicts)} cells. "
        f"Total wall time {total:.0f} s.\n\n![ECAML grid]({args.name}.png)\n")
    data = {"protocol": {"n_splits": args.n_splits, "folds": args.folds, "choose": args.choose,
                         "n_components": args.n_components, "reduce_dims": args.reduce_dims,
                         "grid": grid, "fixed": fixed, "rivals": args.rivals},
            "results": results,
            "rivals": {n: {"best": {k: list(v) for k, v in rivals[n][0].items()},
                           "pca_reused": rivals[n][1]} for n in args.datasets},
            "total_s": total}
    save(args.name, md, data, figures=[(args.name, plot(results, rivals, args.datasets))],
         quick=args.quick, threads="1 (BLAS, torch)")


if __name__ == "__main__":
    main()
