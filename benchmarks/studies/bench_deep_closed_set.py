"""The deep defaults in the users' first workflow: closed-set k-NN in a ``Pipeline``.

Issue 36 moved the deep learner's learning-rate schedule (``optimizer_params
["lr_schedule"]``) from ``"cosine"`` to ``"warmup_stable_decay"`` on unseen-class
retrieval. This study checks the same change where users classify the classes they
trained on: ``make_pipeline(DeepMetricTransformer(random_state=0, device="cpu"),
KNeighborsClassifier(k))``, everything else at its default, over
``StratifiedShuffleSplit(n_splits, test_size=0.3, random_state=0)``; k-NN test accuracy
% at k=1 / k=10 (mean over the splits) and the fit's CPU seconds, one thread. Raw
input is the baseline row. Sets: AT&T faces and COIL-20 at 32x32 (``bench_stress``'s
``att`` and ``coil-few`` images, every class), scikit-learn's digits (8x8 images),
wine and breast cancer (vectors).

Usage::

    python benchmarks/studies/bench_deep_closed_set.py                 # both schedules
    python benchmarks/studies/bench_deep_closed_set.py --schedules cosine --name x
    python benchmarks/studies/bench_deep_closed_set.py --quick         # max_iter=2

Writes ``results/deep_closed_set.{md,json}`` (``--name``).
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
import numpy as np  # noqa: E402
from sklearn.datasets import load_breast_cancer, load_digits, load_wine  # noqa: E402
from sklearn.model_selection import StratifiedShuffleSplit  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import is_quick, markdown_table, results_dir, save  # noqa: E402
from bench_stress import load_set  # noqa: E402
from compare_linear import KS, knn_scores  # noqa: E402

SETS = ("att", "coil20", "digits", "wine", "breast_cancer")
SCHEDULES = ("cosine", "warmup_stable_decay")


def load(name):
    """``(X, y)``: images as (n, 1, H, W), vectors as (n, d)."""
    if name == "att":
        X, y, _ = load_set("att")
        return X[:, None], y
    if name == "coil20":
        X, y, _ = load_set("coil-few")  # the images of every object
        return X[:, None], y
    if name == "digits":
        X, y = load_digits(return_X_y=True)
        return (X / 16.0).reshape(-1, 1, 8, 8).astype(np.float32), y
    loader = {"wine": load_wine, "breast_cancer": load_breast_cancer}[name]
    X, y = loader(return_X_y=True)
    return X.astype(np.float32), y


def knn_accuracy(Z_train, y_train, Z_test, y_test):
    """Accuracy % at each k of ``KS``: the linear benchmarks' k-NN step (``knn_scores``)."""
    acc = knn_scores(Z_train, y_train, Z_test, y_test)
    return [100.0 * acc[k] for k in KS]


def run(name, schedules, n_splits, quick):
    from skdml import DeepMetricTransformer

    X, y = load(name)
    rows = []
    flat = X.reshape(len(X), -1)
    splits = StratifiedShuffleSplit(n_splits, test_size=0.3, random_state=0).split(flat, y)
    for split, (train, test) in enumerate(splits):
        raw = knn_accuracy(flat[train], y[train], flat[test], y[test])
        rows.append({"data": name, "split": split, "method": "raw input", "acc": raw,
                     "cpu_s": 0.0, "n_iter": None, "warnings": []})
        if X.ndim == 2:  # vectors: standardised input, the fair baseline for wine's units
            sc = StandardScaler().fit(flat[train])
            rows.append({"data": name, "split": split, "method": "standardized input",
                         "acc": knn_accuracy(sc.transform(flat[train]), y[train],
                                             sc.transform(flat[test]), y[test]),
                         "cpu_s": 0.0, "n_iter": None, "warnings": []})
        for schedule in schedules:
            est = DeepMetricTransformer(random_state=0, device="cpu",
                                        optimizer_params={"lr_schedule": schedule},
                                        **({"max_iter": 2} if quick else {}))
            c0 = time.process_time()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                est.fit(X[train], y[train])
            cpu = time.process_time() - c0
            acc = knn_accuracy(est.transform(X[train]), y[train], est.transform(X[test]),
                               y[test])
            rows.append({"data": name, "split": split, "method": schedule, "acc": acc,
                         "cpu_s": cpu, "n_iter": est.n_iter_,
                         "warnings": sorted({f"{w.category.__name__}: {str(w.message)[:120]}"
                                             for w in caught})})
            print(f"{name:14s} split {split} {schedule:20s} k=1 {acc[0]:5.1f} k=10 "
                  f"{acc[1]:5.1f} (raw {raw[0]:5.1f} / {raw[1]:5.1f}) cpu {cpu:6.1f} s "
                  f"n_iter {est.n_iter_}", flush=True)
    return rows


def build_markdown(rows, sets, n_splits):
    methods = list(dict.fromkeys(r["method"] for r in rows))
    table = []
    for name in sets:
        for method in methods:
            rs = [r for r in rows if r["data"] == name and r["method"] == method]
            if not rs:
                continue
            acc = np.mean([r["acc"] for r in rs], axis=0)
            table.append([name, method, f"{acc[0]:.1f} / {acc[1]:.1f}",
                          f"{np.mean([r['cpu_s'] for r in rs]):.0f}",
                          ",".join(str(r["n_iter"]) for r in rs if r["n_iter"] is not None)
                          or "-"])
    notes = sorted({f"{r['data']}, {r['method']}, split {r['split']}: {w}"
                    for r in rows for w in r["warnings"]})
    return ("## Deep defaults in a closed-set k-NN pipeline: the learning-rate schedule\n\n"
            "`make_pipeline(DeepMetricTransformer(random_state=0, device=\"cpu\", "
            "optimizer_params={\"lr_schedule\": s}), KNeighborsClassifier(k))`, everything "
            f"else at its default; {n_splits} stratified 70/30 splits; k-NN test accuracy % "
            "at k=1 / k=10 (mean of the splits); fit CPU seconds (one thread); `n_iter_` "
            "per split.\n\n"
            + markdown_table(["data", "method", "k=1 / k=10", "fit CPU s", "n_iter_"], table)
            + ("\n\nWarnings raised by the fits:\n\n" + "\n".join(f"- {n}" for n in notes)
               if notes else "\n\nNo fit raised a warning.") + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=list(SETS), choices=SETS)
    parser.add_argument("--schedules", nargs="+", default=list(SCHEDULES),
                        choices=("cosine", "warmup_stable_decay", "constant"))
    parser.add_argument("--n-splits", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--name", default="deep_closed_set")
    args = parser.parse_args(argv)
    quick = args.quick or is_quick(argv)
    if quick:
        args.data, args.n_splits = ["wine"], 1
    rows = []
    partial = results_dir() / f"{args.name}{'_quick' if quick else ''}.partial.json"
    with threadpool_limits(1):
        for name in args.data:
            rows.extend(run(name, args.schedules, args.n_splits, quick))
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(rows, default=str))
    save(args.name, build_markdown(rows, args.data, args.n_splits), {"results": rows},
         quick=quick, threads="1 (BLAS, torch)")
    partial.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
