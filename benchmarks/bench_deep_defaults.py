"""Do the deep learner's defaults win? Unseen-class retrieval on four image data sets.

Protocol (issue 9, item 1): the first half of the classes train, the other half
is retrieved among itself (zero-shot). Rows: raw pixels, PCA at the deep
embedding's dimension (128, or fewer where the data hold fewer), the linear
learners ECAML and JRD with their defaults, and ``DeepMetricTransformer`` with
nothing but ``random_state`` (plus ``--max-iter`` when the epoch budget is
reduced, which is then said in the table). Omniglot has its own script
(``bench_omniglot.py``).

Usage::

    python benchmarks/bench_deep_defaults.py --quick            # digits only, own files
    python benchmarks/bench_deep_defaults.py --max-iter 15      # the reported run
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import load, markdown_table, save  # noqa: E402
from skdml import ECAML, JRD, DeepMetricTransformer  # noqa: E402
from skdml.metrics import clustering_scores, retrieval_scores  # noqa: E402

KS = (1, 2, 4, 8)


def images(name):
    if name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        X = X / 16.0
    else:
        X, y = load(name)
    side = int(round(np.sqrt(X.shape[1])))
    return X.reshape(-1, 1, side, side).astype(np.float32), y


def evaluate(Z, y):
    r = retrieval_scores(Z, y, k=KS)["recall_at_k"]
    c = clustering_scores(Z, y, random_state=0, n_init=10)
    return {**{f"R@{k}": r[k] for k in KS}, "NMI": c["nmi"], "F1": c["f1"]}


def run(name, max_iter):
    X, y = images(name)
    classes = np.unique(y)
    train = np.isin(y, classes[: len(classes) // 2])
    flat = X.reshape(len(X), -1)
    results = {"raw pixels": (evaluate(flat[~train], y[~train]), None)}
    from sklearn.decomposition import PCA

    n_pca = min(128, flat.shape[1], int(train.sum()))
    methods = {f"PCA ({n_pca})": (PCA(n_pca, random_state=0), flat),
               "ECAML (linear)": (ECAML(random_state=0), flat),
               "JRD (linear)": (JRD(random_state=0), flat)}
    params = {"random_state": 0} if max_iter is None else {"random_state": 0,
                                                           "max_iter": max_iter}
    methods["deep defaults"] = (DeepMetricTransformer(**params), X)
    notes = {}
    for method, (est, data) in methods.items():
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(data[train], y[train])
        seconds = time.perf_counter() - t0
        results[method] = (evaluate(est.transform(data[~train]), y[~train]), seconds)
        if method == "deep defaults":
            notes[method] = f"{est.n_iter_} epochs" + (
                f", best {est.best_iteration_}" if hasattr(est, "best_iteration_") else
                ", no early stopping")
        print(name, method, {k: round(v, 4) for k, v in results[method][0].items()},
              f"{seconds:.1f}s", flush=True)
    rows = [[m] + [f"{100 * s[k]:.2f}" for k in ("R@1", "R@2", "R@4", "R@8", "NMI", "F1")]
            + ["" if t is None else f"{t:.1f}", notes.get(m, "")]
            for m, (s, t) in results.items()]
    title = (f"#### {name}: {len(classes) // 2} classes train ({int(train.sum())} images), "
             f"{len(classes) - len(classes) // 2} unseen classes retrieved "
             f"({int((~train).sum())} images), images {X.shape[1:]}")
    md = title + "\n\n" + markdown_table(
        ["method", "R@1", "R@2", "R@4", "R@8", "NMI", "F1", "fit s", "note"], rows)
    return md, {m: {"scores": s, "fit_s": t} for m, (s, t) in results.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["digits", "usps", "att", "coil20"])
    parser.add_argument("--max-iter", type=int, default=None,
                        help="reduced epoch budget of the deep row (default: its default)")
    parser.add_argument("--quick", action="store_true", help="digits, 3 epochs, own files")
    args = parser.parse_args(argv)
    datasets = ["digits"] if args.quick else args.datasets
    max_iter = 3 if args.quick else args.max_iter
    command = "python benchmarks/bench_deep_defaults.py" + (
        " --quick" if args.quick else
        (f" --max-iter {max_iter}" if max_iter else "") + " --datasets " + " ".join(datasets))
    parts, data = [], {}
    budget = "the default budget (max_iter=100)" if max_iter is None else \
        f"a reduced budget of max_iter={max_iter} epochs"
    for name in datasets:  # saved after every data set: a long run keeps what it measured
        md, data[name] = run(name, max_iter)
        parts.append(md)
        md = ("### Deep defaults on unseen classes (first half of the classes train)\n\n"
              f"Command: `{command}`. Deep row: `DeepMetricTransformer(random_state=0)` with "
              f"{budget}. CPU, {torch.get_num_threads()} torch threads, loaded 2-core "
              "machine.\n\n" + "\n\n".join(parts))
        save("deep_defaults_quick" if args.quick else "deep_defaults", md,
             {"command": command, "max_iter": max_iter, "results": data})


if __name__ == "__main__":
    main()
