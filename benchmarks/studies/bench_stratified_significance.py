"""Should the k-NN setting's hold-out ask for a significant gain before leaving the start?

With ``validation_split="stratified"`` (the closed-set default of ECAML and JRD) the
learned metric replaces the start when its held-out k-NN score beats the start's by more
than ``tol``. On small data sets the hold-out is 10 % of each class, a few dozen samples,
and that comparison is noisy. The class-disjoint hold-out also asks for a paired test
(``SIGNIFICANCE_Z`` standard errors of the per-query gains); this study tries the same
test on the per-sample k-NN scores (``skdml.linear._validation.STRATIFIED_SIGNIFICANCE_Z``,
``None`` = off, the default) on four scikit-learn sets not used to choose the defaults,
standardised, ``StratifiedShuffleSplit(n_splits, test_size=0.3, random_state=0)``, every
learner at its defaults (``random_state=0``): k-NN test accuracy % at k=1 / k=10, mean of
the splits, and the number of splits whose k=10 accuracy falls below the start's.

Usage::

    python benchmarks/studies/bench_stratified_significance.py --learners ecaml \
        --name stratified_significance_ecaml      # ~13 min on one core
    python benchmarks/studies/bench_stratified_significance.py --learners jrd \
        --name stratified_significance_jrd

Writes ``results/stratified_significance.{md,json}`` (or ``--name``).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("SKDML_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine  # noqa: E402
from sklearn.model_selection import StratifiedShuffleSplit  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import markdown_table, save  # noqa: E402
import skdml.linear._validation as validation  # noqa: E402
from skdml import ECAML, JRD  # noqa: E402

SETS = {"iris": load_iris, "wine": load_wine, "breast cancer": load_breast_cancer,
        "digits": load_digits}
LEARNERS = {"ecaml": ECAML, "jrd": JRD}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", nargs="+", choices=sorted(LEARNERS), default=["ecaml"])
    parser.add_argument("--z", nargs="+", default=["none", "1", "2"],
                        help="STRATIFIED_SIGNIFICANCE_Z values ('none': off, the default)")
    parser.add_argument("--n-splits", type=int, default=10)
    parser.add_argument("--name", default="stratified_significance")
    args = parser.parse_args(argv)
    zs = [None if z == "none" else float(z) for z in args.z]
    warnings.simplefilter("ignore")
    rows, data = [], {}
    for learner_name in args.learners:
        learner = LEARNERS[learner_name]
        for set_name, loader in SETS.items():
            X, y = loader(return_X_y=True)
            runs = []
            splits = StratifiedShuffleSplit(args.n_splits, test_size=0.3, random_state=0)
            for train, test in splits.split(X, y):
                scaler = StandardScaler().fit(X[train])
                X_tr, X_te = scaler.transform(X[train]), scaler.transform(X[test])

                def accuracy(model):
                    Z_tr, Z_te = model.transform(X_tr), model.transform(X_te)
                    return [KNeighborsClassifier(k).fit(Z_tr, y[train]).score(Z_te, y[test])
                            for k in (1, 10)]

                run = {"start": accuracy(learner(max_iter=0, random_state=0).fit(X_tr, y[train]))}
                for z in zs:
                    validation.STRATIFIED_SIGNIFICANCE_Z = z
                    model = learner(random_state=0).fit(X_tr, y[train])
                    run[str(z)] = accuracy(model) + [int(model.best_iteration_)]
                validation.STRATIFIED_SIGNIFICANCE_Z = None
                runs.append(run)
            data[f"{learner_name}/{set_name}"] = runs
            for key in ["start"] + [str(z) for z in zs]:
                mean = 100 * np.mean([r[key][:2] for r in runs], axis=0)
                below = "" if key == "start" else \
                    str(sum(r[key][1] < r["start"][1] for r in runs))
                kept = "" if key == "start" else str(sum(r[key][2] == 0 for r in runs))
                label = "start (PCA)" if key == "start" else \
                    ("default (no test)" if key == "None" else f"Z = {key}")
                rows.append([learner_name.upper(), set_name, label,
                             f"{mean[0]:.2f} / {mean[1]:.2f}", below, kept])
    table = markdown_table(["learner", "data", "rule", "k=1 / k=10 %",
                            "splits below the start at k=10", "splits keeping the start"],
                           rows)
    save(args.name, f"## Stratified hold-out: a paired test before leaving the start?\n\n"
         f"{args.n_splits} splits each, standardised features, defaults.\n\n{table}",
         data, threads="SKDML_NUM_THREADS=1")


if __name__ == "__main__":
    main()
