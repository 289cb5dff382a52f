"""Do the deep learner's defaults win? Unseen-class retrieval on four image data sets.

Protocol: the first half of the classes train, the other half
is retrieved among itself (zero-shot). Rows: raw pixels, PCA at the deep
embedding's dimension (128, or fewer where the data hold fewer), the linear
learners ECAML and JRD with their defaults, and ``DeepMetricTransformer`` with
nothing but ``random_state`` (plus ``--max-iter`` when the epoch budget is
reduced, which is then said in the table). Omniglot has its own script
(``bench_omniglot.py``).

Usage::

    python benchmarks/studies/bench_deep_defaults.py --quick            # digits only, own files
    python benchmarks/studies/bench_deep_defaults.py --datasets digits usps att coil20 --seeds 0 1 2
    python benchmarks/studies/bench_deep_defaults.py --early-stopping --datasets att --seeds 0 1 2

``--seeds`` refits every learned row (ECAML, JRD, deep) with each ``random_state``;
with more than one seed it adds, per data set, the mean and spread over the seeds
and how many seeds the deep row wins: k-means NMI on a handful
of unseen classes moves by several points between seeds, so one seed cannot decide it.

``--early-stopping`` compares, per data set and seed, the defaults (every class
trains, the loss plateau ends the fit) with the former default, early stopping on the
MAP@R of 10 % held-out classes (``early_stopping=True``): the check that turning it
off does not let small data sets overfit.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
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


def fit_scored(est, X_train, y_train, X_test, y_test):
    """Fit quietly; return the unseen-class scores and the fit seconds."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X_train, y_train)
    seconds = time.perf_counter() - t0
    return evaluate(est.transform(X_test), y_test), seconds


def run(name, max_iter, seed=0):
    X, y = images(name)
    classes = np.unique(y)
    train = np.isin(y, classes[: len(classes) // 2])
    flat = X.reshape(len(X), -1)
    results = {"raw pixels": (evaluate(flat[~train], y[~train]), None)}
    from sklearn.decomposition import PCA

    n_pca = min(128, flat.shape[1], int(train.sum()))
    methods = {f"PCA ({n_pca})": (PCA(n_pca, random_state=seed), flat),
               "ECAML (linear)": (ECAML(random_state=seed), flat),
               "JRD (linear)": (JRD(random_state=seed), flat)}
    params = {"random_state": seed} if max_iter is None else {"random_state": seed,
                                                              "max_iter": max_iter}
    methods["deep defaults"] = (DeepMetricTransformer(**params), X)
    notes = {}
    for method, (est, data) in methods.items():
        results[method] = fit_scored(est, data[train], y[train], data[~train], y[~train])
        seconds = results[method][1]
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


def seed_summary(name, per_seed):
    """Mean and spread over seeds of each row, and the seeds where the deep row wins.

    ``per_seed`` maps a seed to ``run``'s results. The deep row *wins* a seed on a
    score when it is above every other row of that seed.
    """
    seeds = list(per_seed)
    methods = list(per_seed[seeds[0]])
    rows = []
    for method in methods:
        cells = []
        for key in ("R@1", "NMI"):
            values = 100 * np.array([per_seed[s][method]["scores"][key] for s in seeds])
            cells.append(f"{values.mean():.2f} ± {values.std():.2f}")
        cells += [" / ".join(f"{100 * per_seed[s][method]['scores'][k]:.2f}"
                             for k in ("R@1", "NMI")) for s in seeds]
        rows.append([method, *cells])
    wins = {key: sum(per_seed[s]["deep defaults"]["scores"][key]
                     > max(r["scores"][key] for m, r in per_seed[s].items()
                           if m != "deep defaults") for s in seeds)
            for key in ("R@1", "NMI")}
    md = (f"#### {name}: over random_state in {seeds} (every learned row refitted per seed)"
          "\n\n" + markdown_table(
              ["method", "R@1 mean ± std", "NMI mean ± std",
               *[f"seed {s}: R@1 / NMI" for s in seeds]], rows)
          + f"\n\nThe deep defaults are above every other row in R@1 with {wins['R@1']} "
          f"of {len(seeds)} seeds, in NMI with {wins['NMI']} of {len(seeds)}.")
    return md, wins


def early_stopping_study(datasets, seeds):
    """The defaults against ``early_stopping=True`` (the former default), several seeds."""
    rows, data = [], {}
    for name in datasets:
        X, y = images(name)
        train = np.isin(y, np.unique(y)[: len(np.unique(y)) // 2])
        for label, params in (("defaults (no early stopping)", {}),
                              ("early_stopping=True (former default)",
                               {"early_stopping": True})):
            runs = []
            for seed in seeds:
                est = DeepMetricTransformer(random_state=seed, **params)
                r, seconds = fit_scored(est, X[train], y[train], X[~train], y[~train])
                r.update(fit_s=seconds, n_iter=est.n_iter_,
                         best_iteration=getattr(est, "best_iteration_", None))
                runs.append(r)
                print(name, label, seed, flush=True,
                      *[f"{k}={v:.4g}" for k, v in r.items() if v is not None])
            data.setdefault(name, {})[label] = runs
            cells = [" / ".join(f"{100 * r[k]:.2f}" for k in ("R@1", "NMI")) for r in runs]
            mean = {k: np.mean([r[k] for r in runs]) for k in ("R@1", "NMI", "F1", "fit_s")}
            epochs = ", ".join(f"{r['n_iter']}" + (f" (best {r['best_iteration']})"
                                                  if r["best_iteration"] else "")
                               for r in runs)
            rows.append([name, label, *cells, f"{100 * mean['R@1']:.2f} / "
                         f"{100 * mean['NMI']:.2f} / {100 * mean['F1']:.2f}",
                         f"{mean['fit_s']:.0f}", epochs])
    command = ("python benchmarks/studies/bench_deep_defaults.py --early-stopping --datasets "
               + " ".join(datasets) + " --seeds " + " ".join(map(str, seeds)))
    md = ("### Early stopping on small data sets: the defaults against the former default\n\n"
          f"Command: `{command}`. First half of the classes train, the other half is "
          "retrieved; unseen-class scores (%), NMI and F1 of k-means with 10 restarts. CPU, "
          f"{torch.get_num_threads()} torch threads, loaded 2-core machine (times "
          "indicative only).\n\n"
          + markdown_table(["data set", "setting",
                            *[f"random_state={s}: R@1 / NMI" for s in seeds],
                            "mean R@1 / NMI / F1", "mean fit s", "epochs"], rows))
    save("deep_early_stopping", md, {"command": command, "results": data})


#: The data sets of the reported table (``deep_defaults_seeds0_1_2.*``, with ``--seeds 0 1 2``).
ALL_DATASETS = ("digits", "usps", "att", "coil20")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(ALL_DATASETS),
                        help="a subset is saved as deep_defaults_<names>")
    parser.add_argument("--max-iter", type=int, default=None,
                        help="reduced epoch budget of the deep row (default: its default)")
    parser.add_argument("--quick", action="store_true", help="digits, 3 epochs, own files")
    parser.add_argument("--early-stopping", action="store_true",
                        help="the defaults against early_stopping=True, per seed")
    parser.add_argument("--seeds", nargs="+", type=int, default=None,
                        help="random_state of every learned row, one table per seed and "
                             "a summary (saved as ..._seeds<N>_<M>... unless just 0); with "
                             "--early-stopping, of each pair of fits (default 0 1 2)")
    args = parser.parse_args(argv)
    if args.early_stopping:
        return early_stopping_study(args.datasets, args.seeds or [0, 1, 2])
    seeds = args.seeds or [0]
    datasets = ["digits"] if args.quick else args.datasets
    max_iter = 3 if args.quick else args.max_iter
    command = "python benchmarks/studies/bench_deep_defaults.py" + (
        " --quick" if args.quick else
        (f" --max-iter {max_iter}" if max_iter else "") + " --datasets " + " ".join(datasets)
        + ("" if seeds == [0] else " --seeds " + " ".join(map(str, seeds))))
    stem = "deep_defaults_quick" if args.quick else "deep_defaults" + (
        "" if datasets == list(ALL_DATASETS) else "_" + "_".join(datasets)) + (
        "" if seeds == [0] else "_seeds" + "_".join(map(str, seeds)))
    parts, data = [], {}
    budget = "the default budget (max_iter=90)" if max_iter is None else \
        f"a reduced budget of max_iter={max_iter} epochs"
    seeded = "random_state=" + (str(seeds[0]) if len(seeds) == 1 else "<seed>")
    for name in datasets:  # saved after every data set: a long run keeps what it measured
        per_seed = {}
        for seed in seeds:
            md, per_seed[seed] = run(name, max_iter, seed)
            parts.append(md if len(seeds) == 1 else md.replace("#### ", f"#### seed {seed}, ", 1))
        data[name] = per_seed[seeds[0]]
        if len(seeds) > 1:
            summary, wins = seed_summary(name, per_seed)
            parts.append(summary)
            data[name] = {"per_seed": per_seed, "deep_wins": wins}
        md = ("### Deep defaults on unseen classes (first half of the classes train)\n\n"
              f"Command: `{command}`. Deep row: `DeepMetricTransformer({seeded})` with "
              f"{budget}; ECAML and JRD with their defaults and the same `{seeded}`. CPU, "
              f"{torch.get_num_threads()} torch threads, loaded 2-core machine.\n\n"
              + "\n\n".join(parts))
        save(stem, md, {"command": command, "max_iter": max_iter, "seeds": seeds,
                        "results": data})


if __name__ == "__main__":
    main()
