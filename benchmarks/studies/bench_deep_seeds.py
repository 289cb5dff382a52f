"""Multi-seed study of the deep learner's schedule, batch and budget defaults on unseen classes.

Issue 36 asks to settle, on the class-disjoint protocol and before any default moves,
whether one of four changes to ``DeepMetricTransformer``'s defaults beats them across
seeds and sets. Each row is the defaults with one change:

* ``defaults``: ``DeepMetricTransformer(random_state=seed, device="cpu")``; on images
  ``max_iter="auto"`` resolves to ``AUTO_MAX_ITER`` = 90 epochs and the batches to
  P = min(16, classes) classes x K = max(4, 64 // P) samples (``skdml/deep/_config.py``);
* ``16x16``: ``n_classes_per_batch=min(16, training classes)``, ``n_samples_per_class=16``
  (every training class where a set has fewer than 16; K is capped by the largest
  class, so 10 on AT&T);
* ``max_iter=80`` and ``max_iter=100``: the epoch budget;
* ``constant lr``: ``optimizer_params={"lr_schedule": "constant"}`` (no warm-up and
  cosine decay);
* ``wsd``: ``optimizer_params={"lr_schedule": "warmup_stable_decay"}`` (the cosine's
  warm-up, the peak rate held, then a 1 - sqrt decay to 0 over the last 20 % of the steps),
  the default since 2026-11-27: results measured before then (``deep_seeds.json``,
  ``deep_seeds_held_back.json``) have the cosine schedule as their ``defaults``;
* ``cosine``: ``optimizer_params={"lr_schedule": "cosine"}`` (the default before).

The sets and the protocol are ``bench_stress.py``'s: its ``load_set`` (``--data``: att,
coil-few, digits, digits-light, att-light, vectors-noisy), training on the first
classes, leave-one-out Recall@1 and MAP@R among the classes never trained on, exactly
as ``bench_stress.run_one`` scores the deep rows; ``device="cpu"`` (``--device``), one
thread (``--threads``). Each fit records its CPU and wall seconds, ``n_iter_`` and its warnings.

The run is incremental: the JSON is rewritten after every fit and a rerun of the same
command skips the (set, variant, seed) cells already measured (``--fresh`` starts over);
the table and the figure are rewritten after every set and at the end (``--replot``
rebuilds them from the JSON alone). Sets run one after the other in ``--data`` order,
so a run cut short loses whole sets last.

Usage::

    python benchmarks/studies/bench_deep_seeds.py --data att coil-few digits digits-light \\
        --seeds 0 1 2                       # the study (resumes where it stopped)
    python benchmarks/studies/bench_deep_seeds.py --data att --seeds 0 --variants defaults
    python benchmarks/studies/bench_deep_seeds.py --replot benchmarks/results/deep_seeds.json
    python benchmarks/studies/bench_deep_seeds.py --quick   # smoke run: att, seed 0, max_iter=2

Writes ``results/deep_seeds.{md,json,png}`` (``--name``; ``--quick``: ``*_quick.*``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import is_quick, markdown_table, provenance, results_dir, save
from bench_stress import SETS, load_set

#: The sets in the order of the tables (the study's, cheapest first; vectors last).
ORDER = ("att", "coil-few", "digits", "digits-light", "vectors-noisy", "att-light", "att-light-b",
         "coil-light")
VARIANTS = ("defaults", "16x16", "max_iter=80", "max_iter=100", "constant lr", "wsd", "cosine")


def variant_params(variant, n_train_classes):
    """The keyword arguments that ``variant`` changes from the defaults."""
    if variant == "defaults":
        return {}
    if variant == "16x16":
        return {"n_classes_per_batch": min(16, n_train_classes), "n_samples_per_class": 16}
    if variant.startswith("max_iter="):
        return {"max_iter": int(variant.split("=")[1])}
    if variant == "constant lr":
        return {"optimizer_params": {"lr_schedule": "constant"}}
    if variant == "wsd":
        return {"optimizer_params": {"lr_schedule": "warmup_stable_decay"}}
    if variant == "cosine":
        return {"optimizer_params": {"lr_schedule": "cosine"}}
    raise ValueError(variant)


def resolved_plan(est, data, y):
    """``(P, K, max_iter)`` as the fit resolves them (``skdml/deep/_config.py``)."""
    from skdml.deep import _config

    P, K = _config._batch_plan(est, y, data.shape[1:])
    if est.max_iter != "auto":
        return P, K, int(est.max_iter)
    vectors = data.ndim == 2
    return P, K, _config.AUTO_MAX_ITER_VECTORS if vectors else _config.AUTO_MAX_ITER


#: ``DeepMetricTransformer(device=...)`` of every fit (``--device``).
DEVICE = "cpu"


def run_one(variant, X, y, train, seed, quick):
    """Fit one variant on the training classes; score the unseen ones as ``bench_stress``."""
    from skdml import DeepMetricTransformer
    from skdml.metrics import map_at_r, recall_at_k

    params = variant_params(variant, len(np.unique(y[train])))
    if quick:
        params["max_iter"] = 2
    est = DeepMetricTransformer(random_state=seed, device=DEVICE, **params)
    data = X[:, None] if X.ndim == 3 else X.reshape(len(X), -1)
    test = ~train
    c0, t0 = time.process_time(), time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(data[train], y[train])
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    Z = est.transform(data[test])
    plan = list(resolved_plan(est, data[train], y[train]))
    return {"R@1": float(recall_at_k(Z, y[test], k=1)), "MAP@R": float(map_at_r(Z, y[test])),
            "cpu_s": cpu, "wall_s": wall, "n_iter": getattr(est, "n_iter_", None),
            "params": {k: v for k, v in params.items()}, "plan_P_K_max_iter": plan,
            "warnings": sorted({f"{w.category.__name__}: {str(w.message)[:160]}"
                                for w in caught})}


# ------------------------------------------------------------------ summary
def cells(results, data, variant):
    return [r for r in results if r["data"] == data and r["variant"] == variant]


def stat(rs, key, fmt="{:.3f}"):
    """``mean [min, max]`` over the seeds (``-`` when none)."""
    if not rs:
        return "-"
    v = np.array([r[key] for r in rs], float)
    return f"{fmt.format(v.mean())} [{fmt.format(v.min())}, {fmt.format(v.max())}]"


def paired(results, data, variant, key):
    """Per-seed differences ``variant - defaults`` (seeds measured in both)."""
    base = {r["seed"]: r[key] for r in cells(results, data, "defaults")}
    return np.array([r[key] - base[r["seed"]] for r in cells(results, data, variant)
                     if r["seed"] in base], float)


def verdict(results, data, variant):
    """How ``variant`` compares with the defaults on ``data`` (R@1 and MAP@R)."""
    out = []
    for key in ("R@1", "MAP@R"):
        d = paired(results, data, variant, key)
        if not len(d):
            out.append("-")
            continue
        base = np.array([r[key] for r in cells(results, data, "defaults")], float)
        spread = base.max() - base.min()
        wins = int((d > 0).sum())
        out.append(f"{d.mean():+.3f} ({wins}/{len(d)} seeds up; defaults' spread {spread:.3f})")
    return out


def build_markdown(results, sets, variants, threads, name, header_note=""):
    table = []
    for data in sets:
        for variant in variants:
            rs = cells(results, data, variant)
            if not rs:
                continue
            seeds = ",".join(str(r["seed"]) for r in sorted(rs, key=lambda r: r["seed"]))
            iters = ",".join(str(r["n_iter"]) for r in sorted(rs, key=lambda r: r["seed"]))
            table.append([data, variant, seeds, stat(rs, "R@1"), stat(rs, "MAP@R"),
                          stat(rs, "cpu_s", "{:.0f}"), iters])
    compare = []
    for data in sets:
        for variant in variants[1:] if variants and variants[0] == "defaults" else variants:
            if variant == "defaults" or not cells(results, data, variant):
                continue
            compare.append([data, variant, *verdict(results, data, variant)])
    plans = sorted({f"{r['data']}, {r['variant']}: P={r['plan_P_K_max_iter'][0]}, "
                    f"K={r['plan_P_K_max_iter'][1]}, max_iter={r['plan_P_K_max_iter'][2]}"
                    for r in results if r.get("plan_P_K_max_iter")})
    first = {r["data"]: r for r in reversed(results)}
    classes = ", ".join(f"{d}: {first[d]['n_train_classes']} -> {first[d]['n_test_classes']}"
                        for d in sets if d in first)
    notes = sorted({f"{r['data']}, {r['variant']}, seed {r['seed']}: {w}"
                    for r in results for w in r["warnings"]})
    return ("## Deep defaults across seeds on unseen classes (issue 36)\n\n" + header_note +
            f"Each row: `DeepMetricTransformer(random_state=seed, device=\"{DEVICE}\")` with one "
            f"change; {threads} thread(s). Cells: mean [min, max] over the seeds of "
            "leave-one-out Recall@1 and MAP@R among the unseen classes, CPU seconds of the "
            f"fit; `n_iter_` per seed. Training -> unseen classes: {classes}.\n\n"
            + markdown_table(["set", "variant", "seeds", "R@1", "MAP@R", "CPU s", "n_iter_"],
                             table)
            + "\n\n### Against the defaults, seed by seed\n\n"
              "Mean of the per-seed differences (variant - defaults, same seed), how many "
              "seeds went up, and the defaults' own spread (max - min over seeds).\n\n"
            + markdown_table(["set", "variant", "R@1 difference", "MAP@R difference"],
                             compare)
            + "\n\nBatch plans and budgets as resolved by the fits:\n\n"
            + "\n".join(f"- {p}" for p in plans)
            + ("\n\nWarnings raised by the fits:\n\n" + "\n".join(f"- {n}" for n in notes)
               if notes else "")
            + f"\n\n![Recall@1 and MAP@R]({name}.png)\n")


def plot(results, sets, variants):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = [s for s in sets if any(r["data"] == s for r in results)] or sets
    fig, axes = plt.subplots(2, len(sets), figsize=(1.2 + 2.6 * len(sets), 5.6),
                             squeeze=False)
    x = np.arange(len(variants))
    for j, data in enumerate(sets):
        for i, key in enumerate(("R@1", "MAP@R")):
            ax = axes[i, j]
            for k, variant in enumerate(variants):
                vals = [r[key] for r in cells(results, data, variant)]
                if not vals:
                    continue
                ax.scatter([k] * len(vals), vals, s=14, color=f"C{k}", alpha=0.8)
                ax.hlines(np.mean(vals), k - 0.3, k + 0.3, color=f"C{k}", lw=2)
            base = [r[key] for r in cells(results, data, "defaults")]
            if base:
                ax.axhspan(min(base), max(base), color="0.85", zorder=0)
            ax.set_xticks(x)
            ax.set_xticklabels(variants, rotation=45, ha="right", fontsize=7)
            if i == 0:
                ax.set_title(data)
            if j == 0:
                ax.set_ylabel(f"unseen-class {key}")
    fig.suptitle("Deep defaults and one change each: seeds (dots), mean (bar), "
                 "defaults' seed range (grey)", fontsize=9)
    fig.tight_layout()
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=["att", "coil-few", "digits",
                                                      "digits-light"], choices=SETS)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu",
                        help='the fits\' device ("cuda" on a GPU machine; use another --name)')
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--fresh", action="store_true",
                        help="start over instead of resuming from the JSON")
    parser.add_argument("--name", default="deep_seeds")
    parser.add_argument("--replot", default=None, metavar="JSON",
                        help="rebuild the table and the figure from a JSON of this script")
    args = parser.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    os.environ["SKDML_NUM_THREADS"] = str(args.threads)
    from threadpoolctl import threadpool_limits

    quick = args.quick or is_quick(argv)
    if quick:
        args.data, args.seeds = ["att"], [0]
    name = args.name + ("_quick" if quick else "")
    path = Path(args.replot) if args.replot else results_dir() / f"{name}.json"
    saved = {} if (args.fresh and not args.replot) or not path.exists() else \
        json.loads(path.read_text())
    results = saved.get("results", [])
    runs = saved.get("runs", [])
    if args.replot:
        args.threads = saved["threads"]
        sets = [d for d in ORDER if any(r["data"] == d for r in results)]
        variants = [v for v in VARIANTS if any(r["variant"] == v for r in results)]
    else:
        if results and saved.get("threads") != args.threads:
            raise SystemExit(f"{path} was measured on {saved.get('threads')} thread(s); "
                             "use --fresh or another --name")
        runs.append(provenance())
        sets = [d for d in ORDER if d in args.data or any(r["data"] == d for r in results)]
        variants = [v for v in VARIANTS
                    if v in args.variants or any(r["variant"] == v for r in results)]

    def write_all():
        header = "".join(f"Run {i + 1}: `{p['command']}` from {p['date']} ({p['machine']}).  \n"
                         for i, p in enumerate(runs)) + "\n"
        md = build_markdown(results, sets, variants, args.threads, name, header)
        # the table this command extends in place (its rerun adds the cells not yet measured)
        save(name, md, {"results": results, "threads": args.threads, "runs": runs},
             figures=[(name, plot(results, sets, variants))], quick=quick,
             threads=f"{args.threads} (BLAS, torch)", replace=True)

    def write_json():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"provenance": runs[-1], "results": results,
                                   "threads": args.threads, "runs": runs}, indent=2,
                                  default=str) + "\n")
        tmp.replace(path)

    if args.replot:
        write_all()
        return
    done = {(r["data"], r["variant"], r["seed"]) for r in results}
    with threadpool_limits(args.threads):
        for data in args.data:
            X, y, train_classes = load_set(data)
            train = np.isin(y, train_classes)
            for variant in args.variants:
                for seed in args.seeds:
                    if (data, variant, seed) in done:
                        continue
                    r = run_one(variant, X, y, train, seed, quick)
                    r.update(data=data, variant=variant, seed=seed,
                             n_train_classes=len(train_classes),
                             n_test_classes=len(np.unique(y[~train])),
                             date=time.strftime("%H:%M UTC", time.gmtime()))
                    results.append(r)
                    write_json()
                    print(f"{data:13s} {variant:13s} seed {seed} R@1 {r['R@1']:.3f} "
                          f"MAP@R {r['MAP@R']:.3f} cpu {r['cpu_s']:6.1f} s wall "
                          f"{r['wall_s']:6.1f} s n_iter {r['n_iter']} plan "
                          f"{r['plan_P_K_max_iter']}", flush=True)
            write_all()
    write_all()


if __name__ == "__main__":
    main()
