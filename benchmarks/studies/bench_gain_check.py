"""Tried and not adopted: checking a small stratified hold-out's gain on further hold-outs.

A stratified hold-out of 10% of a small training set is a dozen samples (12 on iris, 14 on
GunPoint), and whether learning beats the PCA start is decided on it. The tried rule
(``LinearMetricLearner._gain_holds`` at this commit): when that hold-out has fewer than 200
samples and its gain is not significant (2 standard errors, paired per sample), train the
chosen candidate again for its best epoch count on up to 4 further hold-outs of the same
size, disjoint from it and from each other, and keep the start unless a rule on the pooled
per-sample gains says otherwise. ``SKDML_DEBUG_DECISION=learned|start`` forces the outcome
(the further hold-outs still run), so that each split is fitted twice and every rule's
outcome is read from the same fits:

``old``: no check (the library's rule); ``mean_all>0``: the mean gain over all hold-outs is
positive; ``mean_more>0``: over the further hold-outs only (not the one the epoch was chosen
on); ``z1_*``, ``z2_all``: the pooled gain exceeds 1 or 2 standard errors; ``start``: always
the start. Cells: k-NN test accuracy % at k=1 / k=10, mean of 8
``StratifiedShuffleSplit(test_size=0.3, random_state=1)`` splits, ``n_components=min(64, d)``.

Usage (at the commit that has the hook)::

    python benchmarks/studies/bench_gain_check.py --data-dir /tmp/external
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("SKDML_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from sklearn.datasets import load_breast_cancer, load_iris, load_wine  # noqa: E402
from sklearn.model_selection import StratifiedShuffleSplit  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import markdown_table, save  # noqa: E402
from skdml import ECAML, JRD  # noqa: E402


def _sets(data_dir):
    def ext(name):
        with np.load(Path(data_dir) / f"{name}.npz") as f:
            return f["X"].astype(float), f["y"]

    def noise():
        rng = np.random.RandomState(0)
        return rng.randn(150, 10), np.repeat(np.arange(3), 50)
    return {"iris": lambda: load_iris(return_X_y=True), "wine": lambda: load_wine(return_X_y=True),
            "breast cancer": lambda: load_breast_cancer(return_X_y=True),
            "GunPoint": lambda: ext("GunPoint"), "ArrowHead": lambda: ext("ArrowHead"),
            "penguins": lambda: ext("penguins"), "OSULeaf": lambda: ext("OSULeaf"),
            "noise (random labels)": noise}


def _z(a):
    a = np.asarray(a)
    if len(a) < 2:
        return np.inf if a.mean() > 0 else 0.0
    se = a.std(ddof=1) / np.sqrt(len(a))
    return (np.inf if a.mean() > 0 else 0.0) if se == 0 else a.mean() / se


def _first(p):
    return _z(p[0]) >= 2


RULES = {
    "old": lambda p: True,
    "mean_all>0": lambda p: _first(p) or np.mean(np.concatenate(p)) > 1e-4,
    "mean_more>0": lambda p: _first(p) or (len(p) > 1 and np.mean(np.concatenate(p[1:])) > 1e-4),
    "z1_all": lambda p: _first(p) or _z(np.concatenate(p)) >= 1,
    "z1_more": lambda p: _first(p) or (len(p) > 1 and _z(np.concatenate(p[1:])) >= 1),
    "z2_all": lambda p: _first(p) or _z(np.concatenate(p)) >= 2,
    "start": lambda p: False,
}


def fits(data_dir, n_splits):
    records = []
    for name, load in _sets(data_dir).items():
        X, y = load()
        n = min(64, X.shape[1])
        splits = StratifiedShuffleSplit(n_splits, test_size=0.3, random_state=1).split(X, y)
        for s, (tr, te) in enumerate(splits):
            for cls in (ECAML, JRD):
                rec = {"data": name, "split": s, "learner": cls.__name__}
                for mode in ("learned", "start"):
                    os.environ["SKDML_DEBUG_DECISION"] = mode
                    est = cls(n, random_state=s)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        est.fit(X[tr], y[tr])
                    Ztr, Zte = est.transform(X[tr]), est.transform(X[te])
                    rec[mode] = [KNeighborsClassifier(k).fit(Ztr, y[tr]).score(Zte, y[te])
                                 for k in (1, 10)]
                    if mode == "learned":
                        paired = getattr(est, "_debug_paired", None)
                        rec["paired"] = None if paired is None else \
                            [list(map(float, a)) for a in paired]
                        rec["best_it"] = int(est.best_iteration_)
                records.append(rec)
                print(name, s, cls.__name__, rec["learned"], rec["start"], flush=True)
    os.environ.pop("SKDML_DEBUG_DECISION", None)
    return records


def table(records):
    cells = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in records:
        for rule_name, rule in RULES.items():
            p = r["paired"]
            if p is None:  # no check ran: the first hold-out alone decided
                use = r["learned"] if r["best_it"] > 0 else r["start"]
            else:
                use = r["learned"] if rule([np.array(a) for a in p]) else r["start"]
            cells[(r["data"], r["learner"])][rule_name].append(use)
    rows, means = [], collections.defaultdict(list)
    for (data, learner), by_rule in cells.items():
        row = [data, learner]
        for rule_name in RULES:
            acc = 100 * np.mean(by_rule[rule_name], axis=0)
            means[rule_name].append(acc)
            row.append(f"{acc[0]:.1f} / {acc[1]:.1f}")
        rows.append(row)
    rows.append(["mean", ""] + [f"{m[0]:.2f} / {m[1]:.2f}" for m in
                                (np.mean(means[r], axis=0) for r in RULES)])
    return markdown_table(["data", "learner"] + list(RULES), rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="bench_external.py --extract's folder")
    parser.add_argument("--n-splits", type=int, default=8)
    parser.add_argument("--reuse", help="a JSON file of this script's fits to tabulate")
    parser.add_argument("--name", default="gain_check")
    args = parser.parse_args(argv)
    if args.reuse:
        with open(args.reuse) as f:
            records = json.load(f)
    else:
        records = fits(args.data_dir, args.n_splits)
    text = "\n".join(["## A small hold-out's gain checked on further hold-outs (not adopted)", "",
                      __doc__.split("\n\n")[1].replace("\n", " "), "", table(records)])
    save(args.name, text, {"records": records}, threads="1 (BLAS, torch)")


if __name__ == "__main__":
    main()
