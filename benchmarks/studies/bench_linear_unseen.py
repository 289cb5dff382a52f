"""Unseen-class Recall@1 of ECAML and JRD defaults against their own PCA start and raw input.

Each data set's classes are split in two (``first``: the first half of the sorted
classes trains; ``even``: every other class; ``1``: a random half, seed 1). Learners
fit on the training classes with their defaults (``random_state=0``) at
``n_components = min(64, n_features // 2)``; Recall@1 is leave-one-out retrieval among
the other classes. ``start`` is the learner with ``max_iter=0`` (its PCA start).
Each checkout runs in its own process (``PYTHONPATH``), so the old defaults can be
set beside the new ones.

Data sets: AT&T faces, COIL-20 and USPS (a 3000-sample subset) from the shared folder,
scikit-learn's digits, and two synthetic sets (``make_classification``; ``synth`` was
looked at while choosing the validation, ``synth2`` and USPS were not).

The learners get ``validation_split="class_disjoint"``, the switch a user sets for
retrieval of unseen classes (``--validation-split`` to change it); before the closed-set
defaults (issue 35) that was their default.

Usage::

    python benchmarks/studies/bench_linear_unseen.py --baseline /tmp/orig
    python benchmarks/studies/bench_linear_unseen.py --data digits synth2 --quick
    python benchmarks/studies/bench_linear_unseen.py --data synth3 synth4 synth5 --name linear_unseen_later
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import (  # noqa: E402
    LATER_SYNTHETIC,
    ROOT,
    SHARED_DATA,
    markdown_table,
    save,
)

DATA = ("att", "coil20", "usps", "digits", "synth", "synth2")
#: Data sets drawn after the linear defaults were settled (``--data synth3 synth4 synth5``):
#: ``LATER_SYNTHETIC``, whose parameters reach the worker on its command line.
LATER = dict(zip(("synth3", "synth4", "synth5"), LATER_SYNTHETIC.values()))
SPLITS = ("first", "even", "1")

WORKER = r"""
import json, sys, time, warnings
import numpy as np
warnings.filterwarnings("ignore")
from skdml import ECAML, JRD
from skdml.metrics import recall_at_k
name, shared, splits = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
later = json.loads(sys.argv[4])  # make_classification parameters of a LATER set, or None
task = json.loads(sys.argv[5])  # e.g. {"validation_split": "class_disjoint"}: the retrieval switch

def load(name):
    if later is not None:
        from sklearn.datasets import make_classification
        return make_classification(**later)
    from skdml import datasets
    from sklearn.datasets import load_digits, make_classification
    if name in ("att", "coil20", "usps"):
        loader = {"att": datasets.load_att_faces, "coil20": datasets.load_coil20,
                  "usps": datasets.load_usps}[name]
        X, y = loader(return_X_y=True, data_home=shared)
        if name == "usps":
            keep = np.random.RandomState(0).permutation(len(y))[:3000]
            X, y = X[keep], y[keep]
        return X, y
    if name == "digits":
        return load_digits(return_X_y=True)
    if name == "synth":
        return make_classification(2000, 100, n_informative=30, n_redundant=20, n_classes=40,
                                   n_clusters_per_class=1, class_sep=2.0, random_state=0)
    if name == "synth2":
        return make_classification(3000, 200, n_informative=20, n_redundant=40, n_classes=30,
                                   n_clusters_per_class=2, class_sep=1.5, random_state=7)

X, y = load(name)
k = min(64, X.shape[1] // 2)
classes = np.unique(y)
for split in splits:
    if split == "first":
        train_classes = classes[: len(classes) // 2]
    elif split == "even":
        train_classes = classes[::2]
    else:
        train_classes = np.random.RandomState(int(split)).permutation(classes)[: len(classes) // 2]
    tr = np.isin(y, train_classes)
    te = ~tr
    row = {"data": name, "split": split, "n_components": k,
           "raw": recall_at_k(X[te], y[te], 1)}
    for lname, cls in (("ECAML", ECAML), ("JRD", JRD)):
        start = cls(n_components=k, max_iter=0, random_state=0).fit(X[tr], y[tr])
        row[lname + " start"] = recall_at_k(start.transform(X[te]), y[te], 1)
        t = time.perf_counter()
        est = cls(n_components=k, random_state=0, **task).fit(X[tr], y[tr])
        row[lname + " s"] = time.perf_counter() - t
        row[lname] = recall_at_k(est.transform(X[te]), y[te], 1)
        # the epoch of the returned model (0: the start was kept); older code: n_iter_
        row[lname + " n_iter_"] = int(getattr(est, "best_iteration_", est.n_iter_))
    print(json.dumps(row), flush=True)
"""


def run(checkout, name, splits, task):
    env = dict(os.environ, PYTHONPATH=str(checkout))
    proc = subprocess.run([sys.executable, "-c", WORKER, name, str(SHARED_DATA), ",".join(splits),
                           json.dumps(LATER.get(name)), json.dumps(task)],
                          capture_output=True, text=True, env=env, cwd="/")
    if proc.returncode:
        raise RuntimeError(f"{checkout} {name}: {proc.stderr.strip()[-500:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=None, help="older checkout to set beside")
    parser.add_argument("--data", nargs="+", default=list(DATA), choices=DATA + tuple(LATER))
    parser.add_argument("--splits", nargs="+", default=list(SPLITS))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--name", default="linear_unseen", help="result file stem")
    parser.add_argument("--validation-split", default="class_disjoint",
                        choices=["class_disjoint", "stratified", "default"],
                        help="the learners' validation_split: class_disjoint (the retrieval "
                             "switch, the default here), stratified, or default (the "
                             "constructor's, whatever it is in each checkout)")
    args = parser.parse_args(argv)
    task = {} if args.validation_split == "default" else \
        {"validation_split": args.validation_split}
    checkouts = [("new", ROOT)] + ([("old", Path(args.baseline))] if args.baseline else [])
    rows, data = [], []
    for name in args.data:
        for tag, checkout in checkouts:
            for r in run(checkout, name, args.splits, task):
                r["code"] = tag
                data.append(r)
                losses = [lname for lname in ("ECAML", "JRD")
                          if r[lname] < r[lname + " start"] - 1e-9]
                rows.append([r["data"], r["split"], tag, r["n_components"], f"{r['raw']:.3f}",
                             f"{r['ECAML start']:.3f}", f"{r['ECAML']:.3f} ({r['ECAML n_iter_']})",
                             f"{r['JRD']:.3f} ({r['JRD n_iter_']})",
                             ", ".join(losses) or "-"])
                print(rows[-1], flush=True)
    header = ["data", "split", "code", "k", "raw", "PCA start", "ECAML (epoch kept)",
              "JRD (epoch kept)", "loses to its start"]
    n_lost = {tag: sum(r[lname] < r[lname + " start"] - 1e-9 for r in data if r["code"] == tag
                       for lname in ("ECAML", "JRD")) for tag, _ in checkouts}
    markdown = (f"Command: `python benchmarks/studies/bench_linear_unseen.py "
                f"{' '.join(sys.argv[1:] if argv is None else argv)}`.\n\n"
                "Unseen-class Recall@1 (class-disjoint halves, defaults but for "
                f"{task or 'nothing'}, `random_state=0`); "
                "`PCA start` is ECAML's and JRD's `max_iter=0` (the same PCA axes). "
                f"Fits that lose to their start: {n_lost}.\n\n" + markdown_table(header, rows))
    save(args.name, markdown, {"rows": data, "baseline": args.baseline})


if __name__ == "__main__":
    main()
