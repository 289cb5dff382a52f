"""Closed-set k-NN with the linear defaults on vector sets not used to choose them.

The closed-set defaults of ECAML and JRD (issue 35: stratified validation, ECAML's
``loss="auto"`` choosing LMNN or the binomial loss on the hold-out) were chosen on AT&T,
COIL-20 and USPS. This study checks them on vector sets that played no part:
scikit-learn's digits, wine and breast cancer, and two ``make_classification`` sets
(26 classes in 300 features, two clusters a class; 60 classes in 150 features), each
over 2 ``StratifiedShuffleSplit(test_size=0.3, random_state=0)`` splits, k-NN test
accuracy % at k=1 / k=10 (mean of the splits), ``n_components = min(32, n_features // 2)``,
against PCA and scikit-learn's NCA. ``ECAML lmnn`` and ``ECAML binomial`` are the two
candidates alone, to show what the choice on the hold-out gains or costs; so are
``JRD neighbor_weight=0`` and ``=1`` for JRD's ``neighbor_weight="auto"``.

Usage::

    python benchmarks/studies/bench_closed_set_vectors.py      # ~5 min on 2 cores
    python benchmarks/studies/bench_closed_set_vectors.py --methods "JRD (default)" \
        "JRD neighbor_weight=0" "JRD neighbor_weight=1" "JRD neighbor_weight=3" \
        --name closed_set_vectors_jrd
    python benchmarks/studies/bench_closed_set_vectors.py --methods "JRD (default)" \
        --sets digits --seeds 4 --name closed_set_vectors_jrd_digits_seeds   # ~2 min

Writes ``results/closed_set_vectors.{md,json}`` (or ``--name``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("SKDML_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from sklearn.datasets import (load_breast_cancer, load_digits, load_wine,  # noqa: E402
                              make_classification)
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.model_selection import StratifiedShuffleSplit  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier, NeighborhoodComponentsAnalysis  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import markdown_table, save  # noqa: E402
from skdml import ECAML, JRD  # noqa: E402
from skdml.linear import ITML_Supervised, LMNN  # noqa: E402

SETS = {
    "digits": lambda: load_digits(return_X_y=True),
    "wine": lambda: load_wine(return_X_y=True),
    "breast cancer": lambda: load_breast_cancer(return_X_y=True),
    "make_classification 26 x 300": lambda: make_classification(
        2600, 300, n_informative=60, n_redundant=40, n_classes=26, n_clusters_per_class=2,
        class_sep=1.5, random_state=5),
    "make_classification 60 x 150": lambda: make_classification(
        n_samples=3600, n_features=150, n_informative=40, n_redundant=10, n_classes=60,
        n_clusters_per_class=1, class_sep=1.8, random_state=21),
}
METHODS = {
    "PCA": lambda n, s: PCA(n, random_state=s),
    "sklearn NCA": lambda n, s: NeighborhoodComponentsAnalysis(n, random_state=s),
    "ECAML (default)": lambda n, s: ECAML(n, random_state=s),
    "ECAML lmnn": lambda n, s: ECAML(n, loss="lmnn", random_state=s),
    "ECAML binomial": lambda n, s: ECAML(n, loss="binomial", random_state=s),
    "JRD (default)": lambda n, s: JRD(n, random_state=s),
    "JRD neighbor_weight=0": lambda n, s: JRD(n, neighbor_weight=0.0, random_state=s),
    "JRD neighbor_weight=1": lambda n, s: JRD(n, neighbor_weight=1.0, random_state=s),
    "JRD neighbor_weight=3": lambda n, s: JRD(n, neighbor_weight=3.0, random_state=s),
    # metric-learn's two rivals of issue 35, as skdml's own ports (metric-learn itself
    # needs scikit-learn < 1.8: see compare_linear.py), on the same parameters as there
    "skdml LMNN (k=3)": lambda n, s: LMNN(n, n_neighbors=3, random_state=s),
    "skdml ITML": lambda n, s: ITML_Supervised(random_state=s),
}
#: The rows of the published table (the JRD candidates alone run with ``--methods``).
DEFAULT_METHODS = [m for m in METHODS if not m.startswith("JRD neighbor_weight")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", nargs="+", default=DEFAULT_METHODS, choices=list(METHODS))
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    parser.add_argument("--seeds", type=int, default=1,
                        help="repeat every fit with random_state 0 .. SEEDS-1 (cells: the mean)")
    parser.add_argument("--name", default="closed_set_vectors")
    args = parser.parse_args(argv)
    methods = {m: METHODS[m] for m in args.methods}
    rows, data = [], {}
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in args.sets:
            X, y = SETS[name]()
            n = min(32, X.shape[1] // 2)
            res = {m: {"acc": [], "cpu_s": []} for m in methods}
            for tr, te in StratifiedShuffleSplit(2, test_size=0.3, random_state=0).split(X, y):
                for m, seed in [(m, seed) for m in methods for seed in range(args.seeds)]:
                    c0 = time.process_time()
                    est = methods[m](n, seed).fit(X[tr], y[tr])
                    res[m]["cpu_s"].append(time.process_time() - c0)
                    Zt, Ze = est.transform(X[tr]), est.transform(X[te])
                    res[m]["acc"].append([KNeighborsClassifier(k).fit(Zt, y[tr]).score(
                        Ze, y[te]) for k in (1, 10)])
                    if m == "ECAML (default)":
                        res[m].setdefault("chosen", []).append(est.loss_)
                    if m == "JRD (default)":
                        res[m].setdefault("chosen", []).append(f"{est.neighbor_weight_:g}")
            data[name] = res
            for m, r in res.items():
                acc = 100 * np.mean(r["acc"], axis=0)
                chosen = f" ({', '.join(r['chosen'])})" if "chosen" in r else ""
                rows.append([name, m + chosen, f"{acc[0]:.1f} / {acc[1]:.1f}",
                             f"{np.median(r['cpu_s']):.1f}"])
                print(rows[-1], flush=True)
    md = ("## Closed-set k-NN on vector sets not used to choose the defaults\n\n"
          "2 x `StratifiedShuffleSplit(test_size=0.3, random_state=0)`; k-NN test accuracy % "
          f"at k=1 / k=10 (mean of the splits and of random_state 0 .. {args.seeds - 1}); "
          "median fit CPU seconds (one thread). "
          "`ECAML (default)` names the loss its hold-out chose on each split, "
          "`JRD (default)` the neighbour weight.\n\n"
          + markdown_table(["data", "method", "k=1 / k=10", "fit CPU s"], rows))
    save(args.name, md, data, threads="1 (BLAS, torch)")


if __name__ == "__main__":
    main()
