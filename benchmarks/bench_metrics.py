"""Peak memory and wall time of skdml's exact retrieval scores vs pytorch-metric-learning.

Random float32 embeddings (default N=60,000, d=512, 100 classes). Each method
runs in a fresh subprocess; we report its wall time and its peak resident
memory *growth* over a baseline taken after the imports and after the data
were made (the peak is reset through ``/proc/self/clear_refs`` where Linux
allows it, else ``ru_maxrss`` is used). Each subprocess runs under an
address-space cap (``--mem-cap-gb``) so that a method needing an N x N matrix
fails fast instead of swapping the machine out.

Methods
-------
ours_recall      ``recall_at_k(X, y, k=[1, 2, 4, 8])``
ours_recall_map  ``retrieval_scores(X, y, k=[1, 2, 4, 8])``: Recall@1/2/4/8 and MAP@R,
                 one neighbour search
ours_map         ``map_at_r(X, y)`` alone: with few classes every query needs its
                 ``R ~ N / n_classes`` nearest neighbours (the large-class case)
pml_k8           PML ``AccuracyCalculator(k=8)``, precision_at_1 (= our R@1)
pml_maxbin       PML ``k="max_bin_count"`` (what MAP@R needs), precision_at_1 + MAP@R
pml_default      PML default ``k=None`` (all N - 1 neighbours), precision_at_1 + MAP@R
``*_batched``    the same PML runs with ``CustomKNN(..., batch_size=B)``, PML's own
                 chunked distance

faiss is not installed (and is no dependency of skdml), so PML's default
``FaissKNN`` cannot run; every PML run uses its torch ``CustomKNN(LpDistance(
normalize_embeddings=False))`` instead (plain Euclidean, like ours).

Scaling with n (``--scaling``): the three problems of issue 37, each at several n,
each run in a fresh process, this checkout and (``--checkout``) another one:
``map_at_r`` on d=16 with 10 classes (R about n/10), ``recall_at_k`` (k=1, 2, 4,
8) on d=32 with 100 classes, ``clustering_scores`` on d=32 with n/20 classes (3,000
at n=60,000); blobs (class means plus unit noise). Wall time, CPU time (all threads)
and peak memory growth.

Usage::

    python benchmarks/bench_metrics.py --scaling --checkout /tmp/old   # scaling with n
    SKDML_NUM_THREADS=2 python benchmarks/bench_metrics.py --scaling --scaling-n 60000 \
        --checkout /tmp/old --name metrics_scaling_2threads     # two threads, n=60,000
    python benchmarks/bench_metrics.py --quick          # N=5000 smoke run
    python benchmarks/bench_metrics.py                  # N=60000, d=512
    python benchmarks/bench_metrics.py --methods ours_recall pml_k8_batched
    # large classes, this checkout against another one (e.g. an older commit):
    python benchmarks/bench_metrics.py --n 55000 --d 16 --n-classes 10 \
        --methods ours_map --checkout /tmp/orig
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

KS = [1, 2, 4, 8]
METHODS = ["ours_recall", "ours_recall_map", "ours_map", "pml_k8", "pml_k8_batched", "pml_maxbin",
           "pml_maxbin_batched", "pml_default", "pml_default_batched"]
#: Which of our runs each PML run is compared with (same metrics, same K).
PAIRS = {"pml_k8": "ours_recall", "pml_k8_batched": "ours_recall",
         "pml_maxbin": "ours_recall_map", "pml_maxbin_batched": "ours_recall_map",
         "pml_default": "ours_recall_map", "pml_default_batched": "ours_recall_map"}


# --------------------------------------------------------------------------------------
# Worker (one method, fresh process)
# --------------------------------------------------------------------------------------
def _status_kib(field):
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak():
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return _status_kib("VmHWM") is not None
    except OSError:
        return False


def _worker(args):
    if args.checkout:  # the skdml of another checkout (timed against this one)
        sys.path.insert(0, str(Path(args.checkout).resolve()))
    import numpy as np
    import torch

    from skdml.metrics import map_at_r, recall_at_k, retrieval_scores

    if args.mem_cap_gb:
        cap = int(args.mem_cap_gb * 2**30) + _status_kib("VmSize") * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    rng = np.random.default_rng(args.seed)
    X = rng.standard_normal((args.n, args.d), dtype=np.float32)
    y = rng.integers(0, args.n_classes, args.n)

    method = args.worker
    if method.startswith("pml"):
        from pytorch_metric_learning.distances import LpDistance
        from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
        from pytorch_metric_learning.utils.inference import CustomKNN

        k = {"pml_k8": 8, "pml_maxbin": "max_bin_count", "pml_default": None}[
            method.replace("_batched", "")]
        include = ("precision_at_1",) if k == 8 else (
            "precision_at_1", "mean_average_precision_at_r")
        knn = CustomKNN(LpDistance(normalize_embeddings=False),
                        batch_size=args.pml_batch_size if method.endswith("_batched") else None)
        calc = AccuracyCalculator(include=include, k=k, device=torch.device("cpu"),
                                  knn_func=knn)

        def run():
            out = calc.get_accuracy(X, y)
            res = {"recall_at_1": out["precision_at_1"]}
            if "mean_average_precision_at_r" in out:
                res["map_at_r"] = out["mean_average_precision_at_r"]
            return res
    elif method == "ours_recall":
        def run():
            rec = recall_at_k(X, y, k=KS)
            return {f"recall_at_{k}": v for k, v in rec.items()}
    elif method == "ours_map":
        def run():
            return {"map_at_r": map_at_r(X, y)}
    elif method == "ours_recall_map":
        def run():
            out = retrieval_scores(X, y, k=KS)
            res = {f"recall_at_{k}": v for k, v in out["recall_at_k"].items()}
            res["map_at_r"] = out["map_at_r"]
            return res
    else:
        raise SystemExit(f"unknown method {method!r}")

    baseline_kib = _status_kib("VmRSS")
    exact_peak = _reset_peak()
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    error = None
    try:
        scores = run()
    except (RuntimeError, MemoryError) as exc:  # torch raises RuntimeError on OOM
        message = str(exc)
        match = re.search(r"allocate (\d+) bytes", message)
        if match:
            error = (f"out of memory: one allocation of {int(match.group(1)) / 1e9:.1f} GB "
                     f"refused (cap +{args.mem_cap_gb:g} GB)")
        else:
            error = f"{type(exc).__name__}: {message.splitlines()[0][:160]}"
        scores = None
    wall = time.perf_counter() - t0
    if exact_peak:
        peak_kib = _status_kib("VmHWM")
    else:
        peak_kib = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, maxrss_before)
    print("RESULT " + json.dumps({
        "method": method, "wall_s": wall, "baseline_mb": baseline_kib / 1024,
        "peak_mb": peak_kib / 1024, "growth_mb": (peak_kib - baseline_kib) / 1024,
        "peak_exact": exact_peak, "scores": scores, "error": error,
        "threads": torch.get_num_threads()}), flush=True)


# --------------------------------------------------------------------------------------
# Scaling with n (issue 37's three problems)
# --------------------------------------------------------------------------------------
SCALING = {"map_at_r": (16, 10), "recall_at_k": (32, 100), "clustering": (32, None)}
SCALING_N = (7_500, 15_000, 30_000, 60_000)


def _scaling_worker(args):
    if args.checkout:
        sys.path.insert(0, str(Path(args.checkout).resolve()))
    import numpy as np

    import skdml
    from skdml.metrics import clustering_scores, map_at_r, recall_at_k

    problem, n = args.scaling_worker, args.n
    d, n_classes = SCALING[problem]
    n_classes = n_classes or max(2, n // 20)
    rng = np.random.RandomState(args.seed)
    y = rng.randint(0, n_classes, n)
    X = (rng.randn(n, d) * (0.3 if problem == "clustering" else 1.0)
         + rng.randn(n_classes, d)[y]).astype(np.float32)
    run = {"map_at_r": lambda: map_at_r(X, y),
           "recall_at_k": lambda: recall_at_k(X, y, k=KS)[1],
           "clustering": lambda: clustering_scores(X, y, random_state=0)["nmi"]}[problem]
    baseline_kib = _status_kib("VmRSS")
    exact_peak = _reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    score = run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak_kib = _status_kib("VmHWM") if exact_peak else \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("RESULT " + json.dumps({
        "problem": problem, "n": n, "d": d, "n_classes": n_classes, "wall_s": wall,
        "cpu_s": cpu, "growth_mb": (peak_kib - baseline_kib) / 1024, "score": score,
        "skdml": skdml.__file__}), flush=True)


def _scaling(args):
    from _common import markdown_table, save

    checkouts = [None] + ([args.checkout] if args.checkout else [])
    results, rows = [], []
    for n in args.scaling_n:
        for problem in SCALING:
            row = {}
            for checkout in checkouts:
                cmd = [sys.executable, __file__, "--scaling-worker", problem, "--n", str(n),
                       "--seed", str(args.seed)] + (["--checkout", checkout] if checkout else [])
                res = _run_worker(problem, cmd, args)
                res["checkout"] = checkout or "this"
                results.append(res)
                row[checkout or "this"] = res
                print(f"  n={n} {problem} [{checkout or 'this checkout'}]: "
                      + (res.get("error") or f"{res['wall_s']:.1f} s wall, {res['cpu_s']:.1f} s "
                         f"CPU, +{res['growth_mb']:.0f} MB, score {res['score']:.4f}"),
                      flush=True)
            new, old = row["this"], row.get(args.checkout) if args.checkout else None

            def cells(res):
                if res is None or res.get("error"):
                    return ["—"] * 3 if res is None else [res["error"][:40], "", ""]
                return [f"{res['wall_s']:.1f}", f"{res['cpu_s']:.1f}", f"{res['growth_mb']:.0f}"]
            ratio = (f"{old['cpu_s'] / new['cpu_s']:.1f}x" if old and not old.get("error")
                     and not new.get("error") else "—")
            same = ("—" if not old or old.get("error") or new.get("error") else
                    "yes" if abs(old["score"] - new["score"]) < 1e-12 else
                    f"{old['score']:.4f} vs {new['score']:.4f}")
            rows.append([problem, n, *cells(new), *cells(old), ratio, same])
    header = ["problem", "n", "wall (s)", "CPU (s)", "peak growth (MB)", "previous: wall (s)",
              "CPU (s)", "peak growth (MB)", "CPU previous / this", "same score"]
    markdown = (
        "## Scaling with n: MAP@R (d=16, 10 classes), Recall@1/2/4/8 (d=32, 100 classes), "
        "clustering scores (d=32, n/20 classes)\n\nEach run in a fresh process (float32 "
        "blobs, seed 0); CPU = all threads of the process; 'previous' = the skdml of "
        f"`{args.checkout}`. Clustering scores with over 100 classes now use skdml's greedy "
        "k-means++ seeding (same algorithm, other random draws), so their scores differ from "
        "the previous ones by the k-means run.\n\n" + markdown_table(header, rows))
    threads = os.environ.get("SKDML_NUM_THREADS")
    save(args.name, markdown, {"args": vars(args), "results": results},
         threads=f"SKDML_NUM_THREADS={threads}" if threads else
         "the thread policy of each checkout")


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------
def _run_method(method, args):
    cmd = [sys.executable, __file__, "--worker", method, "--n", str(args.n), "--d",
           str(args.d), "--n-classes", str(args.n_classes), "--seed", str(args.seed),
           "--mem-cap-gb", str(args.mem_cap_gb), "--pml-batch-size", str(args.pml_batch_size)]
    return _run_worker(method, cmd, args)


def _run_worker(method, cmd, args):
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"method": method, "error": f"timeout after {args.timeout} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"method": method, "error": f"exit {proc.returncode}: {tail[0][:160]}"}


def _compare_checkout(args, results):
    """Time our methods with the skdml of ``args.checkout`` too; print old / new."""
    for method in [m for m in args.methods if m.startswith("ours")]:
        cmd = [sys.executable, __file__, "--worker", method, "--n", str(args.n), "--d",
               str(args.d), "--n-classes", str(args.n_classes), "--seed", str(args.seed),
               "--mem-cap-gb", str(args.mem_cap_gb), "--checkout", args.checkout]
        old, new = _run_worker(method, cmd, args), results[method]
        if old.get("error") or new.get("error"):
            print(f"  {method}: {old.get('error') or new.get('error')}")
            continue
        same = old["scores"] == new["scores"]
        print(f"  {method}: {args.checkout} {old['wall_s']:.1f} s, this checkout "
              f"{new['wall_s']:.1f} s: {old['wall_s'] / new['wall_s']:.1f}x faster; "
              f"scores {'identical' if same else 'DIFFER: ' + str(old['scores'])}",
              flush=True)


def _fmt(value, digits=2):
    return "—" if value is None else f"{value:.{digits}f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=60_000)
    parser.add_argument("--d", type=int, default=512)
    parser.add_argument("--n-classes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="N=5000 smoke run")
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    parser.add_argument("--mem-cap-gb", type=float, default=8.0,
                        help="address-space cap per method above its post-import size")
    parser.add_argument("--pml-batch-size", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per method")
    parser.add_argument("--checkout", help="also time the skdml of this checkout (its root "
                        "folder), each method in its own process; prints time ratios")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--scaling", action="store_true",
                        help="issue 37's three problems at several n (with --checkout: "
                             "against another checkout)")
    parser.add_argument("--scaling-n", type=int, nargs="+", default=list(SCALING_N))
    parser.add_argument("--name", default="metrics_scaling",
                        help="results file of --scaling (results/<name>.md)")
    parser.add_argument("--scaling-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.n = 5000
        args.scaling_n = [2000, 4000]
    if args.scaling_worker:
        return _scaling_worker(args)
    if args.scaling:
        return _scaling(args)
    if args.worker:
        return _worker(args)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from _common import markdown_table, save

    print(f"N={args.n}, d={args.d}, {args.n_classes} classes, cap {args.mem_cap_gb} GB, "
          f"cpu_count={os.cpu_count()}", flush=True)
    results = {}
    for method in args.methods:
        res = _run_method(method, args)
        results[method] = res
        print(f"  {method:>20s}: " + (res["error"] if res.get("error") else
              f"{res['wall_s']:.1f} s, +{res['growth_mb']:.0f} MB peak growth "
              f"(total {res['peak_mb']:.0f} MB) {res['scores']}"), flush=True)
    if args.checkout:
        return _compare_checkout(args, results)

    header = ["method", "time (s)", "peak growth (MB)", "total peak RSS (MB)",
              "time / ours", "peak growth / ours", "R@1", "MAP@R", "note"]
    rows = []
    for method, res in results.items():
        ok = not res.get("error")
        ours = results.get(PAIRS.get(method, ""), {})
        ours_ok = bool(ours) and not ours.get("error")
        time_ratio = res["wall_s"] / ours["wall_s"] if ok and ours_ok else None
        mem_ratio = (res["growth_mb"] / max(ours["growth_mb"], 1.0)
                     if ok and ours_ok else None)
        scores = res.get("scores") or {}
        rows.append([
            method, _fmt(res.get("wall_s"), 1) if ok else "—",
            _fmt(res.get("growth_mb"), 0) if ok else "—",
            _fmt(res.get("peak_mb"), 0) if ok else "—",
            _fmt(time_ratio), _fmt(mem_ratio),
            _fmt(scores.get("recall_at_1"), 5), _fmt(scores.get("map_at_r"), 5),
            res.get("error") or (f"vs {PAIRS[method]}" if method in PAIRS else ""),
        ])
    title = (f"## Retrieval scores: N={args.n}, d={args.d}, {args.n_classes} classes, "
             f"float32, CPU\n\nPeak = resident-memory growth over the post-import, "
             f"post-data baseline, each method in a fresh process capped at "
             f"+{args.mem_cap_gb:g} GB of address space. PML uses its torch CustomKNN "
             f"(faiss is not installed); `_batched` = PML's `CustomKNN(batch_size="
             f"{args.pml_batch_size})`. Ratios are PML / ours, same run.\n")
    markdown = title + "\n" + markdown_table(header, rows)

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    names = list(results)
    for ax, key, label in [(axes[0], "growth_mb", "peak memory growth (MB)"),
                           (axes[1], "wall_s", "wall time (s)")]:
        values = [results[m].get(key) if not results[m].get("error") else 0.0 for m in names]
        colors = ["tab:blue" if m.startswith("ours") else "tab:orange" for m in names]
        bars = ax.bar(range(len(names)), values, color=colors)
        for bar, m in zip(bars, names):
            if results[m].get("error"):
                ax.annotate("OOM\n(cap)" if "memory" in results[m]["error"] else "failed",
                            (bar.get_x() + bar.get_width() / 2, 0), ha="center",
                            va="bottom", fontsize=7, color="red")
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel(label)
        if key == "growth_mb":
            ax.set_yscale("symlog", linthresh=100)
    fig.suptitle(f"Retrieval scores, N={args.n}, d={args.d}")
    name = f"metrics_n{args.n}_d{args.d}"
    save(name, markdown, {"args": vars(args), "results": results}, [(name, fig)])


if __name__ == "__main__":
    main()
