"""Does JRD's k-NN setting stop too early on large data? Its hold-out patience, 10 against 30.

On large training sets (from about 7,500 samples, where the floor of 300 optimisation steps
is below 10 epochs) the early-stopping patience of ECAML's and JRD's validation runs is
``n_iter_no_change=10`` epochs. On a 26-class ``make_classification`` set of two clusters a
class (a stand-in for letter recognition: 20,000 x 16), ``JRD()`` stopped after about 13
epochs and scored what PCA scores, while its neighbour candidate, trained on, climbed far
past it: its held-out score first fell for 10-25 epochs. This study fits ``JRD`` (and
``ECAML``) with ``n_iter_no_change`` 10 (the default) and 30 on that set, a second synthetic
set of three clusters a class, USPS, and the 5,000-digit MNIST sample and two UCR sets of
``bench_external.py`` (``--data-dir``), in the closed-set protocol (stratified 70/30 splits,
k-NN test accuracy % at k = 1 / 10, one thread).

Usage::

    python benchmarks/studies/bench_jrd_patience.py --data-dir DIR   # ~20 min
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
from sklearn.datasets import make_classification  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.model_selection import StratifiedShuffleSplit  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks._common import load, markdown_table, save  # noqa: E402
from skdml import ECAML, JRD  # noqa: E402

#: The synthetic sets (``make_classification`` arguments); ``SETS``: each set's splits.
SYNTHETIC = {
    "synthetic 26 classes x 2 clusters": dict(
        n_samples=20000, n_features=16, n_informative=10, n_redundant=4, n_classes=26,
        n_clusters_per_class=2, class_sep=1.5, random_state=0),
    "synthetic 20 classes x 3 clusters": dict(
        n_samples=12000, n_features=24, n_informative=12, n_redundant=4, n_classes=20,
        n_clusters_per_class=3, class_sep=1.2, random_state=1),
}
SETS = {**{name: 1 for name in SYNTHETIC}, "usps": 3, "mnist5000": 5, "ItalyPowerDemand": 5,
        "OSULeaf": 5}


def data(name, data_dir):
    if name in SYNTHETIC:
        return make_classification(**SYNTHETIC[name])
    if name == "usps":
        return load("usps")
    with np.load(Path(data_dir) / f"{name}.npz") as f:
        return f["X"].astype(np.float64), f["y"]


def accuracy(Z_train, y_train, Z_test, y_test):
    return [100 * KNeighborsClassifier(k).fit(Z_train, y_train).score(Z_test, y_test)
            for k in (1, 10)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="bench_external.py --extract's folder (UCR, MNIST)")
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    parser.add_argument("--learners", nargs="+", default=["JRD", "ECAML"],
                        choices=["JRD", "ECAML"])
    parser.add_argument("--patience", nargs="+", type=int, default=[10, 30])
    parser.add_argument("--name", default="jrd_patience")
    args = parser.parse_args(argv)
    needs_dir = [s for s in args.sets if s not in SYNTHETIC and s != "usps"]
    if needs_dir and not args.data_dir:
        parser.error(f"{needs_dir} need --data-dir (bench_external.py --extract DIR)")
    threadpool_limits(1)
    rows, records = [], []
    for name in args.sets:
        X, y = data(name, args.data_dir)
        n_components = min(64, X.shape[1])
        splits = list(StratifiedShuffleSplit(SETS[name], test_size=0.3,
                                             random_state=0).split(X, y))
        pca = []
        for tr, te in splits:
            start = PCA(n_components).fit(X[tr])
            pca.append(accuracy(start.transform(X[tr]), y[tr], start.transform(X[te]), y[te]))
        pca = np.mean(pca, axis=0)
        rows.append([name, f"{len(splits)}", "PCA", "", f"{pca[0]:.2f} / {pca[1]:.2f}", "", ""])
        for learner in args.learners:
            if learner == "ECAML" and name not in SYNTHETIC and name != "usps":
                continue  # ECAML's figures on the external sets: bench_external.py
            for patience in args.patience:
                acc, cpu, best = [], [], []
                for s, (tr, te) in enumerate(splits):
                    est = {"JRD": JRD, "ECAML": ECAML}[learner](
                        n_components=n_components, n_iter_no_change=patience, random_state=s)
                    c0 = time.process_time()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        est.fit(X[tr], y[tr])
                    cpu.append(time.process_time() - c0)
                    acc.append(accuracy(est.transform(X[tr]), y[tr], est.transform(X[te]),
                                        y[te]))
                    best.append(est.best_iteration_)
                    print(f"  {name} {learner} n_iter_no_change={patience} split {s}: "
                          f"{acc[-1][0]:.1f} / {acc[-1][1]:.1f}, best epoch {best[-1]}, "
                          f"{cpu[-1]:.0f} s", flush=True)
                mean = np.mean(acc, axis=0)
                rows.append([name, f"{len(splits)}", learner, str(patience),
                             f"{mean[0]:.2f} / {mean[1]:.2f}", " ".join(map(str, best)),
                             f"{np.median(cpu):.0f}"])
                records.append({"data": name, "learner": learner, "patience": patience,
                                "acc": acc, "best_iteration": best, "fit_cpu_s": cpu})
    md = ("## JRD's and ECAML's hold-out patience on large data (closed-set k-NN)\n\n"
          "Stratified 70/30 splits (`random_state=0`), `n_components=min(64, features)`, "
          "learner `random_state` = split; k-NN test accuracy % at k = 1 / 10 (mean of the "
          "splits), the best epoch of each split, the median fit CPU seconds (one thread).\n\n"
          + markdown_table(["data", "splits", "learner", "n_iter_no_change",
                            "k=1 / k=10", "best epochs", "fit CPU s"], rows))
    save(args.name, md, {"records": records}, threads="1 (BLAS, torch)")


if __name__ == "__main__":
    main()
