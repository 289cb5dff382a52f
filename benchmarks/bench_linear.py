"""Benchmark of the supervised linear learners ECAML and JRD (the papers' quality bar).

Sections (``--sections``, all by default):

``solvers``
    Fit time and 1-NN accuracy of the two solvers (``batch``: pymanopt CG on a
    fixed set of batches; ``minibatch``: Adam + QR retraction) and of float32
    against float64, on one 70/30 split of each data set: the evidence for the
    defaults.
``table1``
    The SUML Table 1 protocol (stratified 70/30 splits, k-NN accuracy at
    k = 1, 3, 10, 20) for Euclidean, PCA, scikit-learn's NCA, ECAML (triplet,
    N-pair, binomial) and JRD, all with the same ``--n-components``, with
    fit times and the ECAML/JRD : NCA fit-time ratio; the learners run with
    their defaults (early stopping + refit), and "(old defaults)" rows with
    the defaults before their tuning (Adam at 0.01, 100 epochs, no early
    stopping).
``zeroshot``
    First half of the classes train, the rest test (the papers' protocol):
    Recall@1/2/4/8, NMI and F1 on the held-out classes, with the ablation
    ``regularizer_weight=0`` / ``regularizer_weight=0`` against the regularised learners.
``plots``
    Held-out-class Recall@1 against the regulariser weight, and the
    train-class / held-out-class Recall@1 curves over epochs (ECAML Fig. 2),
    obtained by refitting with increasing ``max_iter`` (the same
    ``random_state`` gives the same batches, so a fit with ``max_iter=m`` is
    the state after ``m`` epochs).

Usage::

    python benchmarks/bench_linear.py --quick            # smoke run (~1 min)
    python benchmarks/bench_linear.py --n-splits 10      # the full protocol
"""

from __future__ import annotations

import argparse
import time
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402
from sklearn.neighbors import NeighborhoodComponentsAnalysis  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from _common import knn_protocol, load, markdown_table, mean_std, save  # noqa: E402

import skdml.linear._supervised as linear  # noqa: E402
from skdml import ECAML, JRD  # noqa: E402
from skdml.metrics import clustering_scores, recall_at_k  # noqa: E402
from skdml.model_selection import FirstHalfClassSplit  # noqa: E402

warnings.filterwarnings("ignore", category=ConvergenceWarning)
KS = (1, 3, 10, 20)
RECALL_KS = [1, 2, 4, 8]


def learners(n_components, max_iter, seed=0):
    kw = dict(n_components=n_components, max_iter=max_iter, random_state=seed)
    # the defaults before their tuning: Adam at 0.01 for 100 epochs, no early stopping
    old = dict(n_components=n_components, max_iter=100, learning_rate=0.01,
               early_stopping=False, random_state=seed)
    return {
        "ECAML-triplet": ECAML(loss="triplet", **kw),
        "ECAML-npair": ECAML(loss="npair", **kw),
        "ECAML-binomial": ECAML(loss="binomial", **kw),
        "JRD": JRD(**kw),
        "ECAML-binomial (old defaults)": ECAML(loss="binomial", **old),
        "JRD (old defaults)": JRD(**old),
    }


# --------------------------------------------------------------------------- solvers
def section_solvers(datasets, args):
    rows, data = [], {}
    for name in datasets:
        X, y = load(name)
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
        for label, est, dtype in [
            ("ECAML-binomial minibatch", ECAML(solver="adam"), "float32"),
            ("ECAML-binomial batch", ECAML(solver="conjugate_gradient"), "float32"),
            ("ECAML-binomial batch", ECAML(solver="conjugate_gradient"), "float64"),
            ("JRD minibatch", JRD(solver="adam"), "float32"),
            ("JRD minibatch", JRD(solver="adam"), "float64"),
            ("JRD batch", JRD(solver="conjugate_gradient"), "float32"),
        ]:
            est.set_params(n_components=args.n_components, max_iter=args.max_iter, random_state=0,
                           early_stopping=False)
            linear.DTYPE = getattr(__import__("torch"), dtype)
            t0 = time.perf_counter()
            est.fit(Xtr, ytr)
            fit_s = time.perf_counter() - t0
            linear.DTYPE = __import__("torch").float32
            acc = KNeighborsClassifier(1).fit(est.transform(Xtr), ytr).score(
                est.transform(Xte), yte)
            rows.append([name, label, dtype, f"{fit_s:.1f}", est.n_iter_,
                         f"{est.history_[-1]['loss']:.4f}", f"{100 * acc:.2f}"])
            data.setdefault(name, []).append(dict(method=label, dtype=dtype, fit_s=fit_s,
                                                  n_iter=est.n_iter_, acc1=acc,
                                                  final_loss=est.history_[-1]["loss"]))
            print(rows[-1], flush=True)
    md = ("## Solver choice (one 70/30 split, n_components="
          f"{args.n_components}, max_iter={args.max_iter})\n\n")
    md += markdown_table(["data", "learner / solver", "dtype", "fit s", "n_iter",
                          "final objective", "1-NN acc %"], rows)
    return md, data


# --------------------------------------------------------------------------- table 1
def section_table1(datasets, args):
    blocks, data = [], {}
    for name in datasets:
        X, y = load(name)
        ests = {"Euclidean": None, "PCA": PCA(args.n_components, random_state=0),
                "NCA": NeighborhoodComponentsAnalysis(args.n_components, random_state=0)}
        ests.update(learners(args.n_components, args.max_iter))
        t0 = time.perf_counter()
        res = knn_protocol(ests, X, y, n_splits=args.n_splits, ks=KS, verbose=args.verbose)
        print(f"{name}: protocol done in {time.perf_counter() - t0:.0f}s", flush=True)
        nca_fit = np.mean(res["NCA"]["fit_s"])
        rows = []
        for method, r in res.items():
            fit = np.mean(r["fit_s"])
            ratio = f"{fit / nca_fit:.3f}" if method not in ("Euclidean", "PCA") else ""
            rows.append([method] + [mean_std(r["acc"][k]) for k in KS] + [f"{fit:.2f}", ratio])
        goals = []
        for method in learners(1, 1):
            ok1 = np.mean(res[method]["acc"][1]) >= np.mean(res["NCA"]["acc"][1])
            ok10 = np.mean(res[method]["acc"][10]) >= np.mean(res["NCA"]["acc"][10])
            ratio = np.mean(res[method]["fit_s"]) / nca_fit
            goals.append(f"{method}: k=1 {'>=' if ok1 else '<'} NCA, k=10 "
                         f"{'>=' if ok10 else '<'} NCA, fit time {ratio:.3f} x NCA")
        n, d = X.shape
        blocks.append(
            f"### {name} (n={n}, d={d}, {len(np.unique(y))} classes; {args.n_splits} splits)\n\n"
            + markdown_table(["method"] + [f"k={k}" for k in KS] + ["fit s", "fit / NCA"], rows)
            + "\n\n" + "\n".join(f"- {g}" for g in goals))
        data[name] = res
    md = (f"## SUML Table 1 protocol: k-NN accuracy % (mean ± std over {args.n_splits} "
          f"stratified 70/30 splits), n_components={args.n_components} for every learner, "
          f"max_iter={args.max_iter} for ECAML/JRD with their defaults (early stopping + refit; "
          "'old defaults': lr=0.01, 100 epochs, no early stopping) (NCA: scikit-learn "
          "defaults, max_iter=50)\n\n"
          + "\n\n".join(blocks))
    return md, data


# --------------------------------------------------------------------------- zero-shot
def zero_shot_scores(Z, y):
    rec = recall_at_k(Z, y, RECALL_KS)
    clus = clustering_scores(Z, y, random_state=0)
    return {**{f"R@{k}": rec[k] for k in RECALL_KS}, "NMI": clus["nmi"], "F1": clus["f1"]}


def section_zeroshot(datasets, args):
    blocks, data = [], {}
    for name in datasets:
        X, y = load(name)
        tr, te = next(FirstHalfClassSplit().split(X, y))
        kw = dict(n_components=args.n_components, max_iter=args.max_iter, random_state=0)
        ests = {"Euclidean": None, "PCA": PCA(args.n_components, random_state=0)}
        for loss in ("triplet", "npair", "binomial"):
            ests[f"ECAML-{loss} regularizer_weight=0"] = ECAML(loss=loss, regularizer_weight=0.0, **kw)
            ests[f"ECAML-{loss} regularizer_weight=auto"] = ECAML(loss=loss, **kw)
        ests["JRD regularizer_weight=0"] = JRD(regularizer_weight=0.0, **kw)
        ests["JRD regularizer_weight=1"] = JRD(regularizer_weight=1.0, **kw)
        rows, res = [], {}
        for method, est in ests.items():
            t0 = time.perf_counter()
            Z = X[te] if est is None else est.fit(X[tr], y[tr]).transform(X[te])
            fit_s = time.perf_counter() - t0
            res[method] = dict(zero_shot_scores(Z, y[te]), fit_s=fit_s)
            rows.append([method] + [f"{100 * res[method][c]:.2f}" for c in
                                    [f"R@{k}" for k in RECALL_KS] + ["NMI", "F1"]]
                        + [f"{fit_s:.1f}"])
            print(name, rows[-1], flush=True)
        blocks.append(f"### {name} ({len(np.unique(y[tr]))} train classes, "
                      f"{len(np.unique(y[te]))} held-out classes)\n\n"
                      + markdown_table(["method"] + [f"R@{k}" for k in RECALL_KS]
                                       + ["NMI", "F1", "fit s"], rows))
        data[name] = res
    md = ("## Zero-shot protocol (first half of the classes train, the rest test; "
          f"n_components={args.n_components}; scores % on the held-out classes)\n\n"
          + "\n\n".join(blocks))
    return md, data


# --------------------------------------------------------------------------- plots
def section_plots(datasets, args):
    name = args.plot_dataset
    X, y = load(name)
    tr, te = next(FirstHalfClassSplit().split(X, y))
    # curves over epochs: no early stopping (a fit with max_iter=m is the state after m epochs)
    kw = dict(n_components=args.n_components, max_iter=args.max_iter, random_state=0,
              early_stopping=False)
    ec_weights = [0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0]
    alphas = [0.0, 0.1, 0.3, 1.0, 3.0, 10.0]
    if args.quick:
        ec_weights, alphas = [0.0, 0.1, 1.0], [0.0, 1.0]
    weight_curves = {}
    for label, make, grid in [
        ("ECAML-binomial (regularizer_weight)", lambda w: ECAML(loss="binomial", regularizer_weight=w, **kw),
         ec_weights),
        ("ECAML-triplet (regularizer_weight)", lambda w: ECAML(loss="triplet", regularizer_weight=w, **kw),
         ec_weights),
        ("JRD (regularizer_weight)", lambda a: JRD(regularizer_weight=a, **kw), alphas),
    ]:
        scores = []
        for w in grid:
            Z = make(w).fit(X[tr], y[tr]).transform(X[te])
            scores.append(recall_at_k(Z, y[te], 1))
            print(name, label, w, scores[-1], flush=True)
        weight_curves[label] = (grid, scores)
    fig1, ax = plt.subplots(figsize=(6, 4))
    for label, (grid, scores) in weight_curves.items():
        xs = [max(g, 1e-3) for g in grid]
        ax.semilogx(xs, 100 * np.asarray(scores), "o-", label=label)
    ax.set_xlabel("regulariser weight (0 plotted at 1e-3)")
    ax.set_ylabel("held-out-class Recall@1 %")
    ax.set_title(f"{name}: zero-shot Recall@1 vs regulariser weight")
    ax.legend(fontsize=8)

    epochs = [1, 2, 4, 8, 16, 32, 64] if not args.quick else [1, 2, 4]
    curves = {}
    for label, make in [
        ("ECAML-binomial regularizer_weight=0", lambda m: ECAML(loss="binomial", regularizer_weight=0.0,
                                                       **{**kw, "max_iter": m, "tol": 0.0})),
        ("ECAML-binomial regularizer_weight=auto", lambda m: ECAML(loss="binomial",
                                                          **{**kw, "max_iter": m, "tol": 0.0})),
        ("JRD regularizer_weight=0", lambda m: JRD(regularizer_weight=0.0, **{**kw, "max_iter": m, "tol": 0.0})),
        ("JRD regularizer_weight=1", lambda m: JRD(regularizer_weight=1.0, **{**kw, "max_iter": m, "tol": 0.0})),
    ]:
        train, test = [], []
        for m in epochs:
            est = make(m).fit(X[tr], y[tr])
            train.append(recall_at_k(est.transform(X[tr]), y[tr], 1))
            test.append(recall_at_k(est.transform(X[te]), y[te], 1))
        curves[label] = (train, test)
        print(name, label, train, test, flush=True)
    fig2, axes = plt.subplots(1, 2, figsize=(10, 4))
    for label, (train, test) in curves.items():
        axes[0].plot(epochs, 100 * np.asarray(train), "o-", label=label)
        axes[1].plot(epochs, 100 * np.asarray(test), "o-", label=label)
    for a, title in zip(axes, ["training (seen) classes", "held-out (unseen) classes"]):
        a.set_xscale("log", base=2)
        a.set_xlabel("epochs (minibatch solver)")
        a.set_ylabel("Recall@1 %")
        a.set_title(f"{name}: {title}")
    axes[1].legend(fontsize=8)
    md = (f"## Plots ({name})\n\n![weights](linear_weights.png)\n\n"
          "![curves](linear_curves.png)\n\n"
          + markdown_table(["learner", "weights", "held-out R@1 %"],
                           [[k, g, " ".join(f"{100 * s:.1f}" for s in v)]
                            for k, (g, v) in weight_curves.items()])
          + "\n\n" + markdown_table(["learner", "epochs", "train R@1 %", "held-out R@1 %"],
                                    [[k, epochs, " ".join(f"{100 * s:.1f}" for s in tr_),
                                      " ".join(f"{100 * s:.1f}" for s in te_)]
                                     for k, (tr_, te_) in curves.items()]))
    data = {"weights": weight_curves, "curves": curves, "epochs": epochs}
    return md, data, [("linear_weights", fig1), ("linear_curves", fig2)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--n-splits", type=int, default=10)
    parser.add_argument("--n-components", type=int, default=32)
    parser.add_argument("--max-iter", type=int, default=300)
    parser.add_argument("--datasets", nargs="+", default=["att", "coil20", "usps"],
                        choices=["att", "coil20", "usps"])
    parser.add_argument("--sections", nargs="+",
                        default=["solvers", "table1", "zeroshot", "plots"],
                        choices=["solvers", "table1", "zeroshot", "plots"])
    parser.add_argument("--plot-dataset", default="coil20")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--blas-threads", type=int, default=1)
    parser.add_argument("--name", default=None, help="results file name (default: linear)")
    args = parser.parse_args(argv)
    if args.quick:
        args.n_splits, args.max_iter, args.n_components = 1, 5, 16
        args.datasets = ["att"]
        args.plot_dataset = "att"
    # Every learner on one core (BLAS and torch): a fair fit-time comparison on a shared
    # machine, where multi-threaded BLAS was measured 10-40x slower under load.
    limits = threadpool_limits(args.blas_threads)
    t0 = time.perf_counter()
    parts, data, figures = [f"# ECAML and JRD benchmark\n\nCommand: `python "
                            f"benchmarks/bench_linear.py {' '.join(argv or [])}` "
                            f"(BLAS threads: {args.blas_threads}; torch: 1 thread)"], {}, []
    for section in args.sections:
        if section == "solvers":
            md, d = section_solvers(args.datasets, args)
        elif section == "table1":
            md, d = section_table1(args.datasets, args)
        elif section == "zeroshot":
            md, d = section_zeroshot(args.datasets, args)
        elif section == "plots":
            md, d, figs = section_plots(args.datasets, args)
            figures += figs
        else:
            raise SystemExit(f"unknown section {section!r}")
        parts.append(md)
        data[section] = d
        print(md, flush=True)
    parts.append(f"Total time {time.perf_counter() - t0:.0f}s.")
    name = args.name or "linear"
    save(name, "\n\n".join(parts), data, figures, quick=args.quick)
    limits.restore_original_limits()


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
