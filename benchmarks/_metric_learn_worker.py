"""Fit one metric-learn learner on one split; run by ``compare_linear.py`` in its own venv.

This file runs under the metric-learn virtual environment (scikit-learn 1.7,
metric-learn 0.7.0): it imports neither skdml nor anything of the main
environment. It reads ``--input`` (an ``.npz`` with ``X_train``, ``y_train``,
``X_test``), fits ``--method`` with the JSON ``--params``, and writes
``--output`` (an ``.npz`` with ``Z_train``, ``Z_test``, ``fit_s`` (wall), ``cpu_s``
(with ``--repeat N``: the medians over N fits, the embedding of the last),
``n_fit_samples`` and the versions of this environment).
"""

from __future__ import annotations

import argparse
import inspect
import json
import platform
import time

import numpy as np

#: ``--method`` -> metric-learn's class (the supervised form of the weakly-supervised ones).
METHODS = {"lmnn": "LMNN", "itml": "ITML_Supervised", "lfda": "LFDA", "rca": "RCA_Supervised",
           "mmc": "MMC_Supervised", "sdml": "SDML_Supervised", "lsml": "LSML_Supervised",
           "mlkr": "MLKR", "scml": "SCML_Supervised"}


def versions():
    import metric_learn
    import scipy
    import sklearn

    return {"python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "scikit-learn": sklearn.__version__,
            "metric-learn": metric_learn.__version__}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--method", choices=tuple(METHODS), required=True)
    parser.add_argument("--params", default="{}")
    parser.add_argument("--max-fit-samples", type=int, default=None,
                        help="fit on a stratified subsample of this size (then embed all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1,
                        help="fit this many times (fresh estimators); times are the medians")
    parser.add_argument("--versions-only", action="store_true")
    args = parser.parse_args()
    if args.versions_only:
        print(json.dumps(versions()))
        return
    import metric_learn

    data = np.load(args.input)
    X, y, X_test = data["X_train"], data["y_train"], data["X_test"]
    fit_idx = np.arange(len(y))
    if args.max_fit_samples is not None and args.max_fit_samples < len(y):
        from sklearn.model_selection import train_test_split

        fit_idx, _ = train_test_split(fit_idx, train_size=args.max_fit_samples, stratify=y,
                                      random_state=args.seed)
    params = json.loads(args.params)
    cls = getattr(metric_learn, METHODS[args.method])
    if "random_state" in inspect.signature(cls).parameters:  # LFDA takes none
        params = {"random_state": args.seed, **params}
    walls, cpus = [], []
    for _ in range(max(args.repeat, 1)):
        est = cls(**params)
        t0, c0 = time.perf_counter(), time.process_time()
        est.fit(X[fit_idx], y[fit_idx])
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    fit_s, cpu_s = float(np.median(walls)), float(np.median(cpus))
    np.savez(args.output, Z_train=est.transform(X), Z_test=est.transform(X_test), fit_s=fit_s,
             cpu_s=cpu_s,
             n_fit_samples=len(fit_idx), n_iter=getattr(est, "n_iter_", -1),
             versions=json.dumps(versions()))


if __name__ == "__main__":
    main()
