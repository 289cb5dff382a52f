"""skdml's linear learners against metric-learn (LMNN, ITML) and scikit-learn's NCA.

The linear study's protocol, on the same splits for every method:

* ``StratifiedShuffleSplit(n_splits=3, test_size=0.3, random_state=0)``;
* pixels in [0, 1]; AT&T and COIL-20 reduced by PCA-100 fitted on the training split;
* k-NN test accuracy % at k=1 and k=10 (mean over the splits) and the median fit time.

metric-learn 0.7.0 runs only with scikit-learn <= 1.7, which cannot be imported beside
skdml's scikit-learn 1.9. The script therefore creates (or reuses, and says so) its own
virtual environment, ``benchmarks/.venv-metric-learn/`` (git-ignored), pinned to
scikit-learn 1.7 and metric-learn 0.7.0, and runs LMNN and ITML there, one subprocess
per fit (``_metric_learn_worker.py``); the embeddings come back and are scored here with
the same k-NN code as every other method. ITML is stopped after ``--itml-timeout``
CPU seconds (then its remaining splits on that data set are skipped and the table says
so);
LMNN on USPS fits on a stratified 3,000-sample subsample of the training split (as in
the issue's table) and embeds the whole split. Everything runs on one thread (BLAS,
torch and the subprocesses), split after split with every method interleaved. Fit times
are the CPU seconds of the fitting process (``time.process_time``): on one thread they
are the compute a fit needs, and they do not grow with the load that other jobs put on a
shared machine as wall-clock times do (both are in the JSON file).

Usage::

    python benchmarks/compare_linear.py                  # the full table (~1 h here)
    python benchmarks/compare_linear.py --quick          # smoke run: AT&T, 1 split, short fits
    python benchmarks/compare_linear.py --datasets usps --methods pca nca ecaml jrd

Writes ``benchmarks/results/linear_comparison.{md,json}`` (``--quick``:
``linear_comparison_quick.*``; ``--name`` to choose).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("SKDML_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.model_selection import StratifiedShuffleSplit  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier, NeighborhoodComponentsAnalysis  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load, markdown_table, save  # noqa: E402

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv-metric-learn"
WORKER = HERE / "_metric_learn_worker.py"
REQUIREMENTS = ["scikit-learn==1.7.*", "metric-learn==0.7.0"]
NAMES = {"att": "AT&T", "coil20": "COIL-20", "usps": "USPS"}
KS = (1, 10)
ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                               "SKDML_NUM_THREADS")}


# ------------------------------------------------------------------ the metric-learn venv
def venv_python(venv):
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_venv(venv):
    """Create the metric-learn environment, or reuse it; return ``(python, versions, how)``."""
    python = venv_python(venv)

    def probe():
        out = subprocess.run([str(python), str(WORKER), "--versions-only", "--input", "-",
                              "--output", "-", "--method", "lmnn"], capture_output=True,
                             text=True, env={**os.environ, **ONE_THREAD})
        return json.loads(out.stdout) if out.returncode == 0 else None

    if python.exists():
        found = probe()
        if found is not None and found["scikit-learn"].startswith("1.7") and \
                found["metric-learn"] == "0.7.0":
            print(f"Reusing the metric-learn environment {venv} ({found})", flush=True)
            return python, found, "reused"
    print(f"Creating the metric-learn environment {venv} ({' '.join(REQUIREMENTS)}) ...",
          flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *REQUIREMENTS], check=True)
    found = probe()
    if found is None:
        raise SystemExit(f"The environment {venv} was created but metric-learn does not import.")
    print(f"Created {venv} ({found})", flush=True)
    return python, found, "created"


def main_versions():
    import scipy
    import sklearn
    import torch

    import skdml

    return {"python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "scikit-learn": sklearn.__version__,
            "torch": torch.__version__, "skdml": getattr(skdml, "__version__", "dev")}


def machine():
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "platform": platform.platform()}


# ------------------------------------------------------------------ the methods
def skdml_methods(n_components, quick):
    from skdml import ECAML, JRD, SUML

    extra = dict(max_iter=5) if quick else {}
    return {
        f"PCA-{n_components}": lambda: PCA(n_components, random_state=0),
        f"sklearn NCA-{n_components}": lambda: NeighborhoodComponentsAnalysis(
            n_components, random_state=0, **({"max_iter": 5} if quick else {})),
        f"skdml ECAML-{n_components}": lambda: ECAML(n_components, random_state=0, **extra),
        f"skdml JRD-{n_components}": lambda: JRD(n_components, random_state=0, **extra),
        f"skdml SUML-{n_components} (no labels)": lambda: SUML(
            n_components, random_state=0, **({"max_iter": 3} if quick else {})),
    }


def _cpu_limit(seconds):
    """A ``preexec_fn`` that kills the child after ``seconds`` of CPU time (POSIX)."""
    def limit():
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (int(seconds), int(seconds) + 5))
    return limit if seconds and os.name == "posix" else None


def run_metric_learn(python, method, params, split_file, timeout, max_fit_samples, tmp,
                     repeat=1):
    """One metric-learn fit in the venv; ``{"timeout": True}`` past ``timeout`` CPU seconds.

    ``repeat > 1``: that many fits, the median times (for fits of milliseconds)."""
    out = Path(tmp) / f"{method}_out.npz"
    cmd = [str(python), str(WORKER), "--input", str(split_file), "--output", str(out),
           "--method", method, "--params", json.dumps(params)]
    if max_fit_samples:
        cmd += ["--max-fit-samples", str(max_fit_samples)]
    if repeat > 1:
        cmd += ["--repeat", str(repeat)]
    t0 = time.perf_counter()
    try:  # the CPU limit, plus a generous wall-clock guard against a stalled child
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              timeout=None if timeout is None else 10 * timeout,
                              env={**os.environ, **ONE_THREAD}, preexec_fn=_cpu_limit(timeout))
    except subprocess.TimeoutExpired:
        return {"timeout": True, "wall_s": time.perf_counter() - t0}
    if timeout and proc.returncode != 0 and proc.returncode in (-9, -24, 137, 152):
        return {"timeout": True, "wall_s": time.perf_counter() - t0}  # SIGXCPU / SIGKILL
    if proc.returncode != 0:
        raise RuntimeError(f"metric-learn {method} failed:\n{proc.stderr[-3000:]}")
    res = np.load(out)
    return {"Z_train": res["Z_train"], "Z_test": res["Z_test"], "cpu_s": float(res["cpu_s"]),
            "wall_s": float(res["fit_s"]), "n_fit_samples": int(res["n_fit_samples"]),
            "n_iter": int(res["n_iter"])}


def knn_scores(Z_train, y_train, Z_test, y_test):
    return {k: float(KNeighborsClassifier(k).fit(Z_train, y_train).score(Z_test, y_test))
            for k in KS}


# ------------------------------------------------------------------ the protocol
def prepare(name, n_splits, reduce_dims):
    X, y = load(name)
    splits = []
    for train, test in StratifiedShuffleSplit(n_splits, test_size=0.3,
                                              random_state=0).split(X, y):
        X_train, X_test = X[train], X[test]
        if name in ("att", "coil20"):
            pca = PCA(reduce_dims, random_state=0).fit(X_train)
            X_train, X_test = pca.transform(X_train), pca.transform(X_test)
        splits.append((X_train, y[train], X_test, y[test]))
    return splits


def run(args):
    python, ml_versions, how = (None, None, "skipped")
    ml = [m for m in args.methods if m in ("lmnn", "itml")]
    if ml:
        python, ml_versions, how = ensure_venv(Path(args.venv))
    ours = skdml_methods(args.n_components, args.quick)
    keys = {"pca": f"PCA-{args.n_components}", "nca": f"sklearn NCA-{args.n_components}",
            "ecaml": f"skdml ECAML-{args.n_components}", "jrd": f"skdml JRD-{args.n_components}",
            "suml": f"skdml SUML-{args.n_components} (no labels)",
            "lmnn": f"metric-learn LMNN (k={args.lmnn_k})", "itml": "metric-learn ITML"}
    order = [m for m in ("pca", "nca", "lmnn", "itml", "ecaml", "jrd", "suml")
             if m in args.methods]
    lmnn_params = {"n_neighbors": args.lmnn_k}
    itml_params = {}
    if args.quick:
        lmnn_params.update(max_iter=20, min_iter=5)
        itml_params.update(max_iter=20)
    results = {}
    with threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        for name in args.datasets:
            splits = prepare(name, args.n_splits, args.reduce_dims)
            res = {keys[m]: {"acc": {k: [] for k in KS}, "fit_s": [], "wall_s": [], "note": ""}
                   for m in order}
            timed_out = set()
            for s, (X_train, y_train, X_test, y_test) in enumerate(splits):
                split_file = Path(tmp) / "split.npz"
                np.savez(split_file, X_train=X_train, y_train=y_train, X_test=X_test)
                for m in order:
                    r = res[keys[m]]
                    if m in timed_out:
                        continue
                    if m in ("lmnn", "itml"):
                        max_fit = args.lmnn_max_fit if (m == "lmnn" and name == "usps") else None
                        out = run_metric_learn(
                            python, m, lmnn_params if m == "lmnn" else itml_params, split_file,
                            args.itml_timeout if m == "itml" else None, max_fit, tmp)
                        if out.get("timeout"):
                            timed_out.add(m)
                            r["note"] = f"over {args.itml_timeout / 60:g} min of CPU"
                            print(f"  {name} split {s} {keys[m]}: stopped after "
                                  f"{args.itml_timeout:.0f} CPU s ({out['wall_s']:.0f} s wall)",
                                  flush=True)
                            continue
                        if out["n_fit_samples"] < len(y_train):
                            r["note"] = f"{out['n_fit_samples']:,}-sample fit"
                        Z_train, Z_test = out["Z_train"], out["Z_test"]
                        fit_s, wall_s = out["cpu_s"], out["wall_s"]
                    else:
                        est = ours[keys[m]]()
                        with warnings.catch_warnings(record=True) as caught:
                            warnings.simplefilter("always")
                            t0, c0 = time.perf_counter(), time.process_time()
                            est.fit(X_train, y_train)
                            fit_s = time.process_time() - c0
                            wall_s = time.perf_counter() - t0
                        r.setdefault("warnings", []).extend(
                            sorted({f"{w.category.__name__}: {str(w.message)[:120]}"
                                    for w in caught}))
                        Z_train, Z_test = est.transform(X_train), est.transform(X_test)
                    acc = knn_scores(Z_train, y_train, Z_test, y_test)
                    for k in KS:
                        r["acc"][k].append(acc[k])
                    r["fit_s"].append(fit_s)
                    r["wall_s"].append(wall_s)
                    print(f"  {name} split {s} {keys[m]:>34s}: k=1 {100 * acc[1]:6.2f}  "
                          f"k=10 {100 * acc[10]:6.2f}  fit {fit_s:7.2f} CPU s "
                          f"({wall_s:.2f} s wall)", flush=True)
            results[name] = res
    if args.reuse:  # rows of an earlier run of this script (same protocol), e.g. the rivals
        earlier = json.loads(Path(args.reuse).read_text())
        for name in args.datasets:
            for m in ("pca", "nca", "lmnn", "itml", "ecaml", "jrd", "suml"):
                row = earlier["results"].get(name, {}).get(keys[m])
                if m in args.methods or row is None:
                    continue
                row["acc"] = {int(k): v for k, v in row["acc"].items()}
                row["note"] = row["note"] or "reused"
                results[name][keys[m]] = row
        order = [m for m in ("pca", "nca", "lmnn", "itml", "ecaml", "jrd", "suml")
                 if keys[m] in results[args.datasets[0]]]
        ml_versions = ml_versions or earlier["info"]["metric_learn_environment"]
        how = f"reused from {Path(args.reuse).name}" if how == "skipped" else how
    return results, keys, order, ml_versions, how


def cell(r):
    if not r["fit_s"]:
        return r["note"] or "-"
    acc = " / ".join(f"{100 * np.mean(r['acc'][k]):.1f}" for k in KS)
    note = f" ({r['note']})" if r["note"] else ""
    return f"{acc}{note}, {np.median(r['fit_s']):.2g} s"


def plot(results, keys, order, datasets):
    """k=10 accuracy against the median fit time (log), one panel per data set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.6), squeeze=False)
    for ax, name in zip(axes[0], datasets):
        for m in order:
            r = results[name][keys[m]]
            if not r["fit_s"]:
                continue
            x, acc = max(np.median(r["fit_s"]), 1e-3), [100 * np.mean(r["acc"][k]) for k in KS]
            ax.plot([x, x], acc, "-", color="0.7")
            ax.scatter([x], [acc[1]], label=keys[m], color=f"C{order.index(m)}",
                       marker="o" if "skdml" in keys[m] else "s")
            ax.scatter([x], [acc[0]], marker="_", color="k")
        ax.set_xscale("log")
        ax.set_xlabel("median fit time (CPU s, 1 thread)")
        ax.set_title(f"{NAMES[name]}: k=10 (dot), k=1 (dash)")
    axes[0][0].set_ylabel("k-NN test accuracy %")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def plot_gaps(results, keys, order, datasets):
    """Each learner's accuracy minus the best rival's (NCA, LMNN, ITML), per data set and k."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rivals = [keys[m] for m in ("nca", "lmnn", "itml") if m in order]
    ours = [m for m in ("pca", "ecaml", "jrd", "suml") if m in order]
    fig, axes = plt.subplots(1, len(KS), figsize=(4.5 * len(KS), 3.6), squeeze=False,
                             sharey=True)
    width = 0.8 / max(len(ours), 1)
    for ax, k in zip(axes[0], KS):
        for i, m in enumerate(ours):
            gaps = []
            for name in datasets:
                res = results[name]
                best = max((np.mean(res[r]["acc"][k]) for r in rivals if res[r]["fit_s"]),
                           default=np.nan)
                mine = res[keys[m]]
                gaps.append(100 * (np.mean(mine["acc"][k]) - best) if mine["fit_s"]
                            else np.nan)
            ax.bar(np.arange(len(datasets)) + i * width, gaps, width, label=keys[m],
                   color=f"C{order.index(m)}")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(np.arange(len(datasets)) + 0.4 - width / 2)
        ax.set_xticklabels([NAMES[d] for d in datasets])
        ax.set_title(f"k={k}: accuracy minus the best rival (points)")
    axes[0][0].set_ylabel("points (>= 0: at or above the best rival)")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def goals(results, keys, order):
    lines = []
    rivals = [keys[m] for m in ("nca", "lmnn", "itml") if m in order]
    for name, res in results.items():
        best = {k: max((np.mean(res[m]["acc"][k]) for m in rivals if res[m]["fit_s"]),
                       default=np.nan) for k in KS}
        for m in ("ecaml", "jrd"):
            if m not in order or not res[keys[m]]["fit_s"]:
                continue
            r = res[keys[m]]
            ok = [np.mean(r["acc"][k]) >= best[k] - 1e-12 for k in KS]
            text = ", ".join(f"k={k} {100 * np.mean(r['acc'][k]):.1f} "
                             f"{'>=' if o else '<'} {100 * best[k]:.1f}" for k, o in zip(KS, ok))
            for rival in ("lmnn", "itml"):
                times = res.get(keys.get(rival, ""), {"fit_s": []})["fit_s"]
                if times:
                    ratio = np.median(r["fit_s"]) / np.median(times)
                    text += f"; fit {ratio:.2f} x {rival.upper()}"
                elif rival == "itml" and res.get(keys["itml"], {}).get("note"):
                    text += f"; ITML {res[keys['itml']]['note']}"
            lines.append(f"{NAMES[name]}, {keys[m]} vs the best of {', '.join(rivals)}: {text}")
        if "suml" in order and "pca" in order and res[keys["suml"]]["fit_s"]:
            s, p = res[keys["suml"]], res[keys["pca"]]
            text = ", ".join(f"k={k} {100 * np.mean(s['acc'][k]):.1f} "
                             f"{'>=' if np.mean(s['acc'][k]) >= np.mean(p['acc'][k]) else '<'} "
                             f"{100 * np.mean(p['acc'][k]):.1f}" for k in KS)
            if "nca" in order and res[keys["nca"]]["fit_s"]:
                text += (f"; fit {np.median(s['fit_s']) / np.median(res[keys['nca']]['fit_s']):.3f}"
                         " x NCA")
            lines.append(f"{NAMES[name]}, SUML vs PCA: {text}")
        for m in order:
            w = res[keys[m]].get("warnings")
            if w:
                lines.append(f"{NAMES[name]}, {keys[m]} raised: {'; '.join(sorted(set(w)))}")
    return lines


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run (AT&T, 1 split)")
    parser.add_argument("--datasets", nargs="+", default=["att", "coil20", "usps"],
                        choices=list(NAMES))
    parser.add_argument("--methods", nargs="+",
                        default=["pca", "nca", "lmnn", "itml", "ecaml", "jrd", "suml"],
                        choices=["pca", "nca", "lmnn", "itml", "ecaml", "jrd", "suml"])
    parser.add_argument("--n-splits", type=int, default=3)
    parser.add_argument("--n-components", type=int, default=64)
    parser.add_argument("--reduce-dims", type=int, default=100,
                        help="PCA of AT&T and COIL-20 fitted on the training split")
    parser.add_argument("--lmnn-k", type=int, default=3)
    parser.add_argument("--lmnn-max-fit", type=int, default=3000,
                        help="LMNN on USPS fits on this many training samples")
    parser.add_argument("--itml-timeout", type=float, default=300.0,
                        help="CPU seconds after which an ITML fit is stopped")
    parser.add_argument("--venv", default=str(VENV))
    parser.add_argument("--reuse", default=None,
                        help="JSON of an earlier run: its rows for the methods not run now "
                             "join the table (marked 'reused'); CPU-second fit times compare")
    parser.add_argument("--name", default=None)
    parser.add_argument("--replot", default=None, metavar="JSON",
                        help="rebuild the tables and figures of an earlier run from its JSON "
                             "file (nothing is fitted)")
    args = parser.parse_args(argv)
    if args.quick:
        args.datasets, args.n_splits = ["att"], 1
    if args.replot:
        saved = json.loads(Path(args.replot).read_text())
        info, results = saved["info"], saved["results"]
        for res in results.values():
            for row in res.values():
                row["acc"] = {int(k): v for k, v in row["acc"].items()}
        args.datasets = list(results)
        names = list(results[args.datasets[0]])
        keys = {m: next(k for k in names if m.upper() in k)
                for m in ("pca", "nca", "lmnn", "itml", "ecaml", "jrd", "suml")
                if any(m.upper() in k for k in names)}
        order = [m for m in ("pca", "nca", "lmnn", "itml", "ecaml", "jrd", "suml") if m in keys]
        ml_versions, how, total = info["metric_learn_environment"], \
            info["metric_learn_venv"], info["total_s"]
        load_start = info["load_average_start"]
        args.n_splits = max(len(r["fit_s"]) for r in results[args.datasets[0]].values())
    else:
        load_start = os.getloadavg()
        t0 = time.perf_counter()
        results, keys, order, ml_versions, how = run(args)
        total = time.perf_counter() - t0
        info = {"command": "python benchmarks/compare_linear.py " + " ".join(argv),
                "machine": machine(), "threads": "1 (BLAS, torch, metric-learn subprocesses)",
                "load_average_start": load_start, "load_average_end": os.getloadavg(),
                "main_environment": main_versions(),
                "metric_learn_environment": ml_versions, "metric_learn_venv": how,
                "total_s": total}
    header = ["method"] + [NAMES[d] for d in args.datasets]
    rows = [[keys[m]] + [cell(results[d][keys[m]]) for d in args.datasets] for m in order]
    m = info["machine"]
    name = args.name or ("linear_comparison_quick" if args.quick else "linear_comparison")
    md = (f"## Linear metric learners side by side (the linear study's protocol)\n\n"
          f"Command: `{info['command']}`  \n"
          f"Machine: {m['cpu']}, {m['cores']} cores, shared with other jobs (load average "
          f"{load_start[0]:.1f} at the start, {info['load_average_end'][0]:.1f} at the end); "
          f"every fit on 1 thread.  \n"
          f"Main environment: {info['main_environment']}.  \n"
          f"metric-learn environment ({how}): {ml_versions}.\n\n"
          f"{args.n_splits} x `StratifiedShuffleSplit(test_size=0.3, random_state=0)`; pixels "
          f"in [0, 1]; AT&T and COIL-20 reduced by PCA-{args.reduce_dims} fitted on the "
          "training split. Cells: k-NN test accuracy % at k=1 / k=10 (mean over the splits), "
          "median fit time in CPU seconds (one thread; wall-clock times in the JSON file).\n\n" + markdown_table(header, rows)
          + "\n\n" + "\n".join(f"- {line}" for line in goals(results, keys, order))
          + f"\n\nTotal time {total:.0f} s.\n\n![accuracy against fit time]({name}.png)\n\n"
          f"![gaps to the best rival]({name}_gaps.png)\n")
    written = save(name, md, {"info": info, "results": results},
                   figures=[(name, plot(results, keys, order, args.datasets)),
                            (f"{name}_gaps", plot_gaps(results, keys, order, args.datasets))],
                   threads=info["threads"])
    print("Wrote " + ", ".join(str(path) for path in written))


if __name__ == "__main__":
    main()
