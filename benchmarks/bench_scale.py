"""Scaling out: grid search on Dask vs n_jobs=1 vs loky; exact retrieval vs faiss (time, memory).

Two parts (``--part grid`` / ``--part eval``, default both):

grid
    The users' workflow: ``GridSearchCV`` of ECAML + 3-NN (the linear table's
    pipeline) over ``regularizer_weight`` x ``n_components`` with 5-fold CV on digits
    (or ``--dataset att``), run with ``n_jobs=1``, with loky (``n_jobs=2``) and
    on a ``dask.distributed.LocalCluster`` of 2 worker processes x 1 thread
    (``joblib.parallel_config(backend="dask")``), interleaved ``--repeats``
    times. Reports wall times, ratios to ``n_jobs=1`` in the same round, and
    checks that the three ``cv_results_`` are identical.

eval
    Exact Recall@K (K = 1, 2, 4, 8) of random float32 embeddings (N=100,000,
    d=128, 100 classes): skdml's ``recall_at_k`` against faiss-cpu's exact
    ``IndexFlatL2`` (search of the K+1 nearest, the query itself dropped), each in
    a fresh process with the same thread count, interleaved; wall time and peak
    resident-memory growth (VmHWM over the post-data baseline). faiss is a
    benchmark-only dependency (``pip install -e ".[bench]"``).

Usage::

    python benchmarks/bench_scale.py --quick            # small, writes *_quick files
    python benchmarks/bench_scale.py --part grid
    python benchmarks/bench_scale.py --part eval --n 100000 --d 128
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import markdown_table, save  # noqa: E402
from bench_metrics import _reset_peak, _status_kib  # noqa: E402

KS = [1, 2, 4, 8]


def _machine(threads):
    return (f"{platform.node() or 'host'}: {os.cpu_count()} cores, {threads} thread(s) per "
            f"process, Python {platform.python_version()}; the machine was shared with other "
            "jobs (loaded): read the ratios, not the seconds")


# ---------------------------------------------------------------------------- grid search
def _grid_data(name):
    import numpy as np
    from sklearn.datasets import load_digits

    if name == "digits":
        X, y = load_digits(return_X_y=True)
        return X / 16.0, y
    from _common import load

    X, y = load(name)
    return np.asarray(X, dtype=np.float64), y


def _search(quick):
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline

    from skdml.linear import ECAML

    grid = {"ecaml__regularizer_weight": [0.0, 0.1] if quick else [0.0, 0.05, 0.1],
            "ecaml__n_components": [16] if quick else [16, 32]}
    return GridSearchCV(make_pipeline(ECAML(max_iter=5 if quick else 20, random_state=0),
                                      KNeighborsClassifier(3)),
                        grid, cv=StratifiedKFold(3 if quick else 5, shuffle=True,
                                                 random_state=0))


def run_grid(args):
    import joblib
    import numpy as np
    from dask.distributed import Client, LocalCluster

    X, y = _grid_data(args.dataset)
    if args.quick:
        X, y = X[:400], y[:400]
    rows, raw, reference = [], [], None
    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                           dashboard_address=":0")
    client = Client(cluster)
    startup = time.perf_counter() - t0
    try:
        for rep in range(args.repeats):
            times = {}
            for backend in ("n_jobs=1", "loky", "dask"):
                search = _search(args.quick)
                t = time.perf_counter()
                if backend == "n_jobs=1":
                    search.fit(X, y)
                elif backend == "loky":
                    search.set_params(n_jobs=2).fit(X, y)
                else:
                    with joblib.parallel_config(backend="dask"):
                        search.set_params(n_jobs=-1).fit(X, y)
                times[backend] = time.perf_counter() - t
                scores = search.cv_results_["mean_test_score"]
                if reference is None:
                    reference = scores
                identical = bool(np.array_equal(scores, reference))
                raw.append({"repeat": rep, "backend": backend, "wall_s": times[backend],
                            "identical_to_n_jobs_1": identical,
                            "best_params": search.best_params_})
            for backend, wall in times.items():
                rows.append([rep, backend, f"{wall:.1f}", f"{wall / times['n_jobs=1']:.2f}",
                             next(r["identical_to_n_jobs_1"] for r in raw[-3:]
                                  if r["backend"] == backend)])
    finally:
        client.close()
        cluster.close()
    n_fits = len(_search(args.quick).param_grid["ecaml__regularizer_weight"]) * len(
        _search(args.quick).param_grid["ecaml__n_components"]) * (3 if args.quick else 5)
    command = "python benchmarks/bench_scale.py --part grid" + (" --quick" if args.quick else "")
    md = (f"## Grid search on Dask vs n_jobs=1 vs loky: ECAML + 3-NN on {args.dataset} "
          f"(N={len(y)}, {n_fits} fits + refit)\n\n"
          f"Command: `{command}`. Machine: {_machine(1)}. loky: `n_jobs=2`; Dask: "
          f"LocalCluster of 2 worker processes x 1 thread on 127.0.0.1 (start-up "
          f"{startup:.1f} s, not counted), `joblib.parallel_config(backend='dask')`. The "
          "three backends run one after the other in each round (interleaved).\n\n"
          + markdown_table(["round", "backend", "wall (s)", "time / n_jobs=1",
                            "cv_results_ identical to n_jobs=1"], rows))
    name = "scale_grid_quick" if args.quick else "scale_grid"
    figures = []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3))
        backends = ["n_jobs=1", "loky", "dask"]
        means = [np.mean([r["wall_s"] for r in raw if r["backend"] == b]) for b in backends]
        ax.bar(backends, means, color=["grey", "tab:blue", "tab:orange"])
        ax.set_ylabel("wall time (s), mean of rounds")
        ax.set_title(f"GridSearchCV ECAML+3NN, {n_fits} fits\n2 cores, loaded machine",
                     fontsize=9)
        figures.append((name, fig))
    except ImportError:
        pass
    save(name, md, {"command": command, "machine": _machine(1), "startup_s": startup,
                    "runs": raw}, figures)


# ---------------------------------------------------------------------------- evaluation
def _eval_worker(args):
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    X = rng.standard_normal((args.n, args.d), dtype=np.float32)
    y = rng.integers(0, args.n_classes, args.n)
    if args.worker == "skdml":
        from skdml.metrics import recall_at_k

        def run():
            return recall_at_k(X, y, k=KS)
    else:
        import faiss

        faiss.omp_set_num_threads(args.threads)

        def run():
            index = faiss.IndexFlatL2(args.d)
            index.add(X)
            _, nbrs = index.search(X, max(KS) + 1)
            # drop the query itself (it is the first hit unless duplicates tie with it)
            own = nbrs == np.arange(args.n)[:, None]
            keep = np.where(own.any(axis=1, keepdims=True), ~own, np.ones_like(own))
            nbrs = np.stack([row[m][:max(KS)] for row, m in zip(nbrs, keep)])
            same = y[nbrs] == y[:, None]
            return {k: float(np.mean(same[:, :k].any(axis=1))) for k in KS}
    baseline = _status_kib("VmRSS")
    exact = _reset_peak()
    t0 = time.perf_counter()
    scores = run()
    wall = time.perf_counter() - t0
    peak = _status_kib("VmHWM") if exact else None
    print("RESULT " + json.dumps({"method": args.worker, "wall_s": wall,
                                  "growth_mb": (peak - baseline) / 1024 if peak else None,
                                  "peak_mb": peak / 1024 if peak else None,
                                  "scores": {str(k): v for k, v in scores.items()}}),
          flush=True)


def _run_eval(method, args):
    env = dict(os.environ, SKDML_NUM_THREADS=str(args.threads),
               OMP_NUM_THREADS=str(args.threads))
    cmd = [sys.executable, __file__, "--worker", method, "--n", str(args.n), "--d",
           str(args.d), "--n-classes", str(args.n_classes), "--seed", str(args.seed),
           "--threads", str(args.threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{method} failed: {proc.stderr.strip()[-400:]}")


def run_eval(args):
    import importlib.util

    # faiss-cpu is in the [bench] extra only: without it, skdml is timed alone (it was a
    # RuntimeError after the grid's files were written)
    has_faiss = importlib.util.find_spec("faiss") is not None
    methods = ("skdml", "faiss") if has_faiss else ("skdml",)
    if not has_faiss:
        print("faiss-cpu is not installed (pip install -e '.[bench]'): skdml is timed alone",
              flush=True)
    runs = []
    for rep in range(args.repeats):
        order = methods if rep % 2 == 0 else methods[::-1]
        for method in order:
            out = _run_eval(method, args)
            out["repeat"] = rep
            runs.append(out)
            print(json.dumps(out), flush=True)
    rows = []
    for rep in range(args.repeats):
        ours = next(r for r in runs if r["repeat"] == rep and r["method"] == "skdml")
        theirs = next((r for r in runs if r["repeat"] == rep and r["method"] == "faiss"), None)
        if theirs is None:
            rows.append([rep, f"{ours['wall_s']:.1f}", "not installed", "—",
                         f"{ours['growth_mb']:.0f}", "—", "—"])
            continue
        rows.append([rep, f"{ours['wall_s']:.1f}", f"{theirs['wall_s']:.1f}",
                     f"{ours['wall_s'] / theirs['wall_s']:.2f}", f"{ours['growth_mb']:.0f}",
                     f"{theirs['growth_mb']:.0f}", ours["scores"]["1"] == theirs["scores"]["1"]
                     and ours["scores"]["8"] == theirs["scores"]["8"]])
    command = (f"python benchmarks/bench_scale.py --part eval --n {args.n} --d {args.d} "
               f"--threads {args.threads}" + (" --quick" if args.quick else ""))
    md = (f"## Exact Recall@{{1,2,4,8}}: skdml vs faiss IndexFlatL2, N={args.n}, d={args.d}, "
          f"{args.n_classes} classes, float32\n\nCommand: `{command}`. Machine: "
          f"{_machine(args.threads)}. Each run in a fresh process, the two methods "
          "alternating; memory = growth of the peak resident set over the baseline after "
          "the data were made. faiss searches K+1 neighbours and drops the query."
          + ("" if has_faiss else " faiss-cpu was not installed here (`pip install -e "
             "'.[bench]'`): skdml alone.") + "\n\n"
          + markdown_table(["round", "skdml (s)", "faiss (s)", "time skdml / faiss",
                            "skdml peak growth (MB)", "faiss peak growth (MB)",
                            "same R@1, R@8"], rows))
    name = f"scale_eval_n{args.n}_d{args.d}" + ("_quick" if args.quick else "")
    save(name, md, {"command": command, "machine": _machine(args.threads), "runs": runs},
         threads=f"{args.threads} per worker process (SKDML_NUM_THREADS, OMP_NUM_THREADS, "
                 "torch), whatever the runner's own")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["grid", "eval", "both"], default="both")
    parser.add_argument("--dataset", default="digits", choices=["digits", "att", "coil20"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--n-classes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _eval_worker(args)
    if args.quick:
        args.n = min(args.n, 5000)
        args.repeats = 1
    if args.part in ("grid", "both"):
        run_grid(args)
    if args.part in ("eval", "both"):
        run_eval(args)


if __name__ == "__main__":
    main()
