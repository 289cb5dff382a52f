"""Ablation of the deep learner's default levers: each one turned back, one at a time.

Rows: the defaults, then the defaults with one lever changed to what it was before
the current defaults (or off): no input standardisation, no augmentation, a constant learning
rate, the binomial deviance loss (the former default), the former SmallCNN backbone,
batches of 16 samples per class (4 on Omniglot by default), early stopping on 10 %
held-out classes (the default until it was turned off after the held-back check below;
the digits' five classes never had it), no ``preserve_input``; and one lever the other
way, batches of 32 classes x 4 samples (16 x 4 by default on Omniglot; with five
training digits it asks for more classes than there are and the digits cell is
skipped). Every row gets the same epoch budget
(``--max-iter``; 100 is the whole default budget, where the fit stops when its loss
stops improving). The committed ``deep_levers_*`` tables were measured while early
stopping was still the default: their "defaults" row is today's early-stopping row and
their ``early_stopping=False`` row is today's defaults (CPU fits are deterministic).
Scores: unseen-class Recall@1 and NMI on

* Omniglot: train small1, retrieve among the small2 characters never trained on (small2
  without Greek and Latin, which small1 also holds: ``bench_omniglot.zero_shot``);
* scikit-learn digits: train digits 0-4, retrieve among 5-9 (8x8 images).

``--preserve`` instead studies the weight of ``preserve_input`` (0, 1, 10 and
``"auto"`` = 50 / training classes), with the default budget, on the vector digits
(``n_components=16``, as in the README demo) in three class splits, and on Omniglot
with ``--max-iter`` epochs.

``--plateau`` compares, on Omniglot with the whole default budget, the default
schedule with early stopping on (warm-up, then cosine over ``max_iter`` epochs,
usually cut short by early stopping while the rate is still high; the default when it
was measured) with the same schedule whose rate is divided
by 10 whenever the validation MAP@R has not improved for 5 epochs (twice at most;
early stopping still ends the fit after 10 epochs without improvement).

``--held-back`` checks the two best levers that beat the defaults on Omniglot in the
whole-budget lever table (batches of 16 classes x 16 samples, and no early stopping)
where the table did not measure them: small1 -> small2 with ``random_state=1`` and
small2 -> small1 with 0, against the defaults of the time (early stopping on; no early
stopping is the default since).

Usage::

    python benchmarks/studies/bench_deep_levers.py --max-iter 3
    python benchmarks/studies/bench_deep_levers.py --max-iter 100     # the whole default budget
    python benchmarks/studies/bench_deep_levers.py --preserve --max-iter 10
    python benchmarks/studies/bench_deep_levers.py --plateau
    python benchmarks/studies/bench_deep_levers.py --held-back
    python benchmarks/studies/bench_deep_levers.py --budget 60

``--budget N`` runs the defaults with ``max_iter=N`` (the cosine schedule follows it) on
the three Omniglot runs of the lever table and the held-back check.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import markdown_table, save  # noqa: E402
from benchmarks.studies.bench_digits_zero_shot import load as load_digits_01  # noqa: E402
from benchmarks.studies.bench_digits_zero_shot import splits as digit_splits  # noqa: E402
from benchmarks.bench_omniglot import zero_shot  # noqa: E402
from skdml import DeepMetricTransformer  # noqa: E402
from skdml.callbacks import Callback  # noqa: E402
from skdml.deep import SmallCNN  # noqa: E402
from skdml.metrics import clustering_scores, recall_at_k  # noqa: E402


def small_cnn(input_shape):
    return SmallCNN(input_shape[0])


LEVERS = {
    "defaults": {},
    "standardize=False": dict(standardize=False),
    "augment=False": dict(augment=False),
    "lr_schedule='constant'": dict(optimizer_params={"lr_schedule": "constant"}),
    "loss='binomial' (former default)": dict(loss="binomial"),
    "SmallCNN (former default backbone)": dict(backbone=small_cnn),
    "batches of 16 samples per class": dict(n_samples_per_class=16),
    "batches of 32 classes x 4 samples": dict(n_classes_per_batch=32, n_samples_per_class=4),
    # the former default: on with 10 classes or more (the digits' fit is the defaults')
    "early stopping on (former default)": dict(early_stopping=True),
    "preserve_input=0": dict(preserve_input=0.0),
}
PRESERVE_WEIGHTS = (0.0, 1.0, 10.0, "auto")


def tasks(quick=False):
    """Omniglot and the digits as images (``quick``: the digits only)."""
    X, y = load_digits_01()
    X = X.reshape(-1, 1, 8, 8)
    digits = {"digits 0-4->5-9": (X[y < 5], y[y < 5], X[y >= 5], y[y >= 5])}
    if quick:
        return digits
    return {"omniglot small1->small2": zero_shot(), **digits}


def score(est, X, y, X_te, y_te, n_init=10):
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    seconds = time.perf_counter() - t0
    Z = est.transform(X_te)
    clusters = clustering_scores(Z, y_te, random_state=0, n_init=n_init)  # one k-means
    return {"R@1": recall_at_k(Z, y_te, k=1), "NMI": clusters["nmi"], "F1": clusters["f1"],
            "fit_s": seconds, "n_iter": est.n_iter_}


def preserve_study(max_iter, quick=False):
    """Unseen-class R@1 / NMI against the weight of ``preserve_input`` (``quick``: digits)."""
    X, y = load_digits_01()
    tasks = {"digits " + name.replace(" ", ""): (X[m], y[m], X[~m], y[~m], {"n_components": 16})
             for name, m in digit_splits(y).items()}
    if quick:
        tasks = {name: (*task[:4], {**task[4], "max_iter": max_iter})
                 for name, task in tasks.items()}
    else:
        tasks[f"omniglot ({max_iter} epochs)"] = (*zero_shot(), {"max_iter": max_iter})
    from sklearn.decomposition import PCA

    rows, data = [], {}
    for task, (X, y, X_te, y_te, params) in tasks.items():
        flat = lambda A: A.reshape(len(A), -1)  # noqa: E731
        n_pca = params.get("n_components", 128)
        refs = {"raw input": flat(X_te),
                f"PCA ({n_pca})": PCA(n_pca, random_state=0).fit(flat(X)).transform(flat(X_te))}
        row = [task] + [f"{100 * recall_at_k(Z, y_te, k=1):.1f} / "
                        f"{100 * clustering_scores(Z, y_te, random_state=0, n_init=10)['nmi']:.1f}"
                        for Z in refs.values()]
        for weight in PRESERVE_WEIGHTS:
            r = score(DeepMetricTransformer(random_state=0, preserve_input=weight, **params),
                      X, y, X_te, y_te)
            data.setdefault(task, {})[str(weight)] = r
            row.append(f"{100 * r['R@1']:.1f} / {100 * r['NMI']:.1f}")
            print(task, weight, round(r["R@1"], 4), round(r["NMI"], 4), f"{r['fit_s']:.0f}s",
                  flush=True)
        rows.append(row)
    header = ["task (unseen classes)", "raw input", "PCA"] + [
        f"preserve_input={w!r}" for w in PRESERVE_WEIGHTS]
    command = f"python benchmarks/studies/bench_deep_levers.py --preserve --max-iter {max_iter}"
    md = ("### `preserve_input`: unseen-class Recall@1 / NMI (%) against its weight\n\n"
          f"Command: `{command}`. `DeepMetricTransformer(random_state=0, preserve_input=w)`; "
          "digits as 64-d vectors with `n_components=16` and the default budget, Omniglot "
          f"28x28 with {max_iter} epochs. `\"auto\"` is 50 / training classes (10 on digits, "
          f"about 0.37 on Omniglot's 136). CPU, {torch.get_num_threads()} torch threads.\n\n"
          + markdown_table(header, rows))
    save(f"deep_preserve_input_{max_iter}ep", md, {"command": command, "results": data})


def preserve_seeds_study(max_iter, seeds):
    """Omniglot only: ``preserve_input`` 0 against ``"auto"`` over several seeds (one seed at
    10 epochs is noisy: the ``--preserve`` table's gap moved from 0.7 to 4.2 R@1 on a re-run)."""
    X, y, X_te, y_te = zero_shot()
    rows, data = [], {}
    for seed in seeds:
        row = [str(seed)]
        for weight in (0.0, "auto"):
            r = score(DeepMetricTransformer(random_state=seed, preserve_input=weight,
                                            max_iter=max_iter), X, y, X_te, y_te)
            data.setdefault(str(seed), {})[str(weight)] = r
            row.append(f"{100 * r['R@1']:.1f} / {100 * r['NMI']:.1f}")
            print(seed, weight, round(r["R@1"], 4), round(r["NMI"], 4), f"{r['fit_s']:.0f}s",
                  flush=True)
        rows.append(row)
    means = [np.mean([100 * data[str(s)][w]["R@1"] for s in seeds]) for w in ("0.0", "auto")]
    nmis = [np.mean([100 * data[str(s)][w]["NMI"] for s in seeds]) for w in ("0.0", "auto")]
    rows.append(["mean"] + [f"{m:.1f} / {n:.1f}" for m, n in zip(means, nmis)])
    command = (f"python benchmarks/studies/bench_deep_levers.py --preserve --max-iter {max_iter} "
               f"--seeds {' '.join(map(str, seeds))}")
    md = ("### `preserve_input` 0 against `\"auto\"` on Omniglot, over seeds: unseen-class "
          "Recall@1 / NMI (%)\n\n"
          f"Command: `{command}`. `DeepMetricTransformer(random_state=seed, preserve_input=w, "
          f"max_iter={max_iter})`, small1 -> the 106 small2 characters never trained on; "
          f"`\"auto\"` is 50 / 136 = 0.37. CPU, {torch.get_num_threads()} torch threads.\n\n"
          + markdown_table(["random_state", "preserve_input=0", 'preserve_input="auto"'], rows))
    save(f"deep_preserve_input_{max_iter}ep_seeds", md, {"command": command, "results": data})


HELD_BACK_LEVERS = ("defaults", "batches of 16 samples per class",
                    "early stopping on (former default)")


#: (train, retrieve, random_state): the lever table's run, then the held-back check's two.
OMNIGLOT_RUNS = (("small1", "small2", 0), ("small1", "small2", 1), ("small2", "small1", 0))


def omniglot_splits():
    """``(source, target) -> zero_shot(source, target)``: the test side's characters are unseen."""
    return {(source, target): zero_shot(source, target) for source, target, _ in OMNIGLOT_RUNS}


def held_back_study(quick=False):
    """Omniglot, whole default budget: the two best levers of the lever table, checked.

    The lever table (``--max-iter 100``) measured every lever on small1 -> small2 with
    ``random_state=0``; the two best of those that beat the defaults there (batches of
    16 x 16, no early stopping, now the default) are checked with a second seed and in
    the reverse direction (train small2, retrieve in small1).
    """
    data_sets = omniglot_splits()
    runs = OMNIGLOT_RUNS[1:2] if quick else OMNIGLOT_RUNS[1:]
    extra = {"max_iter": 1} if quick else {}
    rows, data = [], {}
    for lever in HELD_BACK_LEVERS:
        params, row = LEVERS[lever], [lever]
        for source, target, seed in runs:
            X, y, X_te, y_te = data_sets[source, target]
            est = DeepMetricTransformer(random_state=seed, **params, **extra)
            r = score(est, X, y, X_te, y_te)
            r["best_iteration"] = getattr(est, "best_iteration_", None)  # None: no validation
            data.setdefault(lever, {})[f"{source}->{target} seed {seed}"] = r
            row.append(f"{100 * r['R@1']:.2f} / {100 * r['NMI']:.2f} "
                       f"({r['n_iter']} ep, best {r['best_iteration'] or '-'}; "
                       f"{r['fit_s']:.0f} s)")
            print(lever, row[-1], flush=True)
        rows.append(row)
    header = ["setting"] + [f"{source}->{target}, random_state={seed}: R@1 / NMI"
                            for source, target, seed in runs]
    command = ("python benchmarks/studies/bench_deep_levers.py --held-back"
               + (" --quick" if quick else ""))
    md = ("### Omniglot, whole default budget: the winning levers, held-back check\n\n"
          f"Command: `{command}`. `DeepMetricTransformer(random_state=seed)` with its defaults, "
          "with batches of 16 classes x 16 samples (16 x 4 by default) and with early "
          "stopping on 10 % held-out classes (the former default), 28x28, unseen-character "
          "scores (%); small1 -> small2 with "
          "`random_state=0` is in the lever table (`--max-iter 100`). "
          f"NMI of k-means with 10 restarts. CPU, {torch.get_num_threads()} torch threads; "
          "fits one after the other on a shared machine (times indicative only).\n\n"
          + markdown_table(header, rows))
    save("deep_levers_held_back", md, {"command": command, "results": data}, quick=quick)


def budget_study(max_iter, quick=False):
    """Omniglot: the defaults with another epoch budget (the cosine schedule follows it)."""
    data_sets = omniglot_splits()
    rows, data = [], {}
    for source, target, seed in OMNIGLOT_RUNS[:1] if quick else OMNIGLOT_RUNS:
        X, y, X_te, y_te = data_sets[source, target]
        est = DeepMetricTransformer(random_state=seed, max_iter=max_iter)
        r = data[f"{source}->{target} seed {seed}"] = score(est, X, y, X_te, y_te)
        rows.append([f"{source} -> {target}", str(seed), f"{100 * r['R@1']:.2f}",
                     f"{100 * r['NMI']:.2f}", str(r["n_iter"]), f"{r['fit_s']:.0f}"])
        print(rows[-1], flush=True)
    command = f"python benchmarks/studies/bench_deep_levers.py --budget {max_iter}" + (
        " --quick" if quick else "")
    md = (f"### Omniglot: the defaults with max_iter={max_iter}\n\n"
          f"Command: `{command}`. `DeepMetricTransformer(random_state=seed, "
          f"max_iter={max_iter})`, 28x28, unseen-character scores (%), NMI of k-means with 10 "
          f"restarts. CPU, {torch.get_num_threads()} torch threads; fits one after the other "
          "(times indicative only).\n\n"
          + markdown_table(["train -> retrieve", "random_state", "R@1", "NMI", "epochs",
                            "fit s"], rows))
    save(f"deep_budget_{max_iter}ep", md, {"command": command, "results": data}, quick=quick)


class DecayOnPlateau(Callback):
    """The default schedule's rates divided by 10 after ``patience`` epochs without gain.

    A public callback: the learner's cosine schedule sets each step's rate, then this
    hook scales it (``info.optimizer``), so the decays compound with the schedule.
    """

    def __init__(self, patience=5, max_decays=2, tol=1e-4):
        self.patience, self.max_decays, self.tol = patience, max_decays, tol
        self.best, self.stale, self.decays, self.factor = -math.inf, 0, [], 1.0

    def _scale(self, info):
        if self.factor != 1.0:
            for group in info.optimizer.param_groups:
                group["lr"] *= self.factor

    def on_batch_end(self, estimator, info):
        self._scale(info)  # after the schedule's step: the rate of the next step

    def on_epoch_end(self, estimator, info):
        value = info.record.get("validation_score")
        if value is None:
            return
        self.best, self.stale = (value, 0) if value > self.best + self.tol else \
            (self.best, self.stale + 1)
        if self.stale >= self.patience and len(self.decays) < self.max_decays:
            for group in info.optimizer.param_groups:  # undo this epoch's scale, rescale
                group["lr"] /= self.factor
            self.factor /= 10
            self._scale(info)
            self.stale = 0
            self.decays.append(info.epoch)


def plateau_study(max_iter=None):
    """Omniglot, whole default budget (or ``max_iter``): the schedule against decay on plateau."""
    Xo, yo, Xt, yt = zero_shot()
    rows, data = [], {}
    from skdml.deep._config import AUTO_MAX_ITER  # "auto" on images: the label's number
    budget = AUTO_MAX_ITER if max_iter is None else max_iter
    for name in (f"warm-up + cosine over {budget} epochs, early stopping (former defaults)",
                 "+ rate / 10 after 5 epochs without gain (twice at most)"):
        plateau = DecayOnPlateau() if name.startswith("+") else None
        est = DeepMetricTransformer(random_state=0, early_stopping=True,
                                    callbacks=None if plateau is None else [plateau],
                                    **({} if max_iter is None else {"max_iter": max_iter}))
        r = score(est, Xo, yo, Xt, yt)
        r.update(best_iteration=est.best_iteration_,
                 decays=plateau.decays if plateau is not None else [])
        data[name] = r
        rows.append([name, f"{100 * r['R@1']:.2f}", f"{100 * r['NMI']:.2f}",
                     f"{100 * r['F1']:.2f}", f"{r['fit_s']:.0f}",
                     f"{r['n_iter']} (best {r['best_iteration']})",
                     ", ".join(map(str, r["decays"])) or "-"])
        print(rows[-1], flush=True)
    command = "python benchmarks/studies/bench_deep_levers.py --plateau"
    md = ("### Omniglot small1 -> small2, whole default budget: the rate schedule\n\n"
          f"Command: `{command}`. `DeepMetricTransformer(random_state=0, "
          "early_stopping=True)`, 28x28; unseen-character scores (%). "
          f"CPU, {torch.get_num_threads()} torch threads.\n\n"
          + markdown_table(["schedule", "R@1", "NMI", "F1", "fit s", "epochs",
                            "rate cut after epoch"], rows))
    save("deep_plateau_schedule", md, {"command": command, "results": data})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-iter", type=int, default=3)
    parser.add_argument("--levers", nargs="+", default=list(LEVERS))
    parser.add_argument("--preserve", action="store_true",
                        help="study the weight of preserve_input instead")
    parser.add_argument("--seeds", nargs="+", type=int, default=None,
                        help="with --preserve: Omniglot only, weights 0 and 'auto', these seeds")
    parser.add_argument("--plateau", action="store_true",
                        help="Omniglot, whole budget: cosine against decay on plateau")
    parser.add_argument("--held-back", action="store_true",
                        help="Omniglot, whole budget: the defaults against batches of 16 x 16 "
                             "and early stopping (the former default), with a second seed "
                             "and in the reverse direction")
    parser.add_argument("--budget", type=int, default=None, metavar="N",
                        help="Omniglot: the defaults with max_iter=N in the three runs of the "
                             "lever table and the held-back check")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run, own files: 1 epoch, the digits only (--plateau: "
                             "Omniglot, 3 epochs; --held-back: one Omniglot run, 1 epoch)")
    args = parser.parse_args(argv)
    if args.quick:
        args.max_iter = 1
    if args.preserve and args.seeds:
        return preserve_seeds_study(args.max_iter, args.seeds)
    if args.preserve:
        return preserve_study(args.max_iter, quick=args.quick)
    if args.plateau:
        return plateau_study(3 if args.quick else None)
    if args.held_back:
        return held_back_study(quick=args.quick)
    if args.budget:
        return budget_study(1 if args.quick else args.budget, quick=args.quick)
    rows, data = [], {}
    all_tasks = tasks(quick=args.quick)
    # k-means restarts for NMI: one, as in the published 3-epoch table; ten otherwise
    n_init = 1 if args.max_iter == 3 else 10
    for lever in args.levers:
        row = [lever]
        for task, (X, y, X_te, y_te) in all_tasks.items():
            params = LEVERS[lever]
            if params.get("n_classes_per_batch", 0) > len(np.unique(y)):
                row += ["n/a", "", ""]  # more classes per batch than the task has
                continue
            if params.get("early_stopping") is True and len(np.unique(y)) < 10:
                row += ["= defaults", "", ""]  # the former rule: off below 10 classes
                continue
            est = DeepMetricTransformer(random_state=0, max_iter=args.max_iter, **params)
            r = data.setdefault(lever, {})[task] = score(est, X, y, X_te, y_te, n_init=n_init)
            row += [f"{100 * r['R@1']:.2f}", f"{100 * r['NMI']:.2f}",
                    f"{r['fit_s']:.0f} ({r['n_iter']} ep)"]
            print(lever, task, round(r["R@1"], 4), round(r["NMI"], 4), f"{r['fit_s']:.0f}s",
                  r["n_iter"], flush=True)
        rows.append(row)
    header = ["setting"]
    for task in all_tasks:
        header += [f"{task} R@1", "NMI", "fit s"]
    command = f"python benchmarks/studies/bench_deep_levers.py --max-iter {args.max_iter}"
    md = (f"### Levers of the deep defaults, one at a time, budget {args.max_iter} epochs\n\n"
          f"Command: `{command}`. CPU, {torch.get_num_threads()} torch threads, loaded 2-core "
          f"machine (fit times are indicative only); NMI of k-means with {n_init} "
          f"restart{'s' if n_init > 1 else ''}; `random_state=0`.\n\n"
          + markdown_table(header, rows))
    stem = f"deep_levers_{args.max_iter}ep"
    save(stem, md, {"command": command, "results": data},
         figures=[(stem, levers_figure(data, args.levers, list(all_tasks), args.max_iter))])


def levers_figure(data, levers, task_names, max_iter):
    """Unseen-class R@1 and NMI of every lever (horizontal bars, one panel per task and score).

    The defaults' value is a dashed line, so a bar left of it is a lever whose default
    helps; a lever the task cannot take (more classes per batch than it has) has no bar.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 * len(task_names), sharey=True,
                             figsize=(3.2 * 2 * len(task_names), 0.35 * len(levers) + 1.2))
    axes = np.atleast_1d(axes)
    for t, task in enumerate(task_names):
        for s, key in enumerate(("R@1", "NMI")):
            ax = axes[2 * t + s]
            values = [100 * data[lever][task][key] if task in data.get(lever, {}) else np.nan
                      for lever in levers]
            ax.barh(np.arange(len(levers)), values,
                    color=["tab:blue" if lever == "defaults" else "tab:gray" for lever in levers])
            if task in data.get("defaults", {}):
                ax.axvline(100 * data["defaults"][task][key], color="tab:blue", ls="--", lw=1)
            finite = [v for v in values if np.isfinite(v)]
            ax.set_xlim(max(0.0, min(finite) - 5), min(100.0, max(finite) + 3))
            ax.set_title(f"{task}\nunseen-class {key} (%)", fontsize=8)
            ax.tick_params(labelsize=7)
    axes[0].set_yticks(np.arange(len(levers)), levers, fontsize=7)
    axes[0].invert_yaxis()
    fig.suptitle(f"Deep defaults with one lever changed, {max_iter}-epoch budget "
                 "(dashed: the defaults)", fontsize=9)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    main()
