"""The deep learner's defaults on vector data: unseen-class retrieval and fit time.

Two studies, each fit in its own process (so that a baseline checkout can be timed
in the same run, on the same loaded machine, and the ratio reported):

* ``--speed``: one default ``DeepMetricTransformer`` fit on 10000 x 4096 float32
  vectors of 40 classes (uniform noise, and Gaussian classes in a 64-d subspace),
  timed for this checkout and, with ``--baseline DIR``, for another one
  (``PYTHONPATH=DIR``, on the uniform data only).
* the default study: class-disjoint halves of vector data sets (the first half of a
  seeded permutation of the classes trains, the other half is retrieved), Recall@1
  and MAP@R on the unseen half for the raw features, PCA-64, ECAML's defaults and the
  deep learner's defaults (and the baseline checkout's defaults with ``--baseline``),
  with each fit's time. Data sets: scikit-learn's digits (64-d), USPS (256-d, 300
  images per digit), COIL-20 (1024-d) and AT&T faces (4096-d) flattened, from
  ``--data-home`` (``../shared/datasets`` by default), a synthetic high-dimensional
  Gaussian-class set and ``make_classification`` with 30 classes.

    python benchmarks/studies/bench_deep_vector.py --baseline /tmp/orig
    python benchmarks/studies/bench_deep_vector.py --speed --baseline /tmp/orig
    python benchmarks/studies/bench_deep_vector.py --held-out --baseline /tmp/orig

``--held-out`` scores splits not used to choose the vector defaults (digits even -> odd,
USPS and COIL-20 halves of other seeds, a 40-class ``make_classification`` set)
(``deep_vector_held_out.{md,json}``).

Writes ``benchmarks/results/deep_vector.{md,json}`` (``deep_vector_speed.{md,json}``
with ``--speed``): the command, the machine and the thread count come with the table.
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

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DATASETS = ["digits", "usps", "coil20", "att", "gauss", "mkclass"]


# ----------------------------------------------------------------------------- data
def load(name, data_home):
    """``(X float32 (n, d), y)`` of a vector data set."""
    if name == "digits":
        from sklearn.datasets import load_digits
        X, y = load_digits(return_X_y=True)
    elif name in ("usps", "coil20", "att"):
        from skdml.datasets import load_att_faces, load_coil20, load_usps
        loader = {"usps": load_usps, "coil20": load_coil20, "att": load_att_faces}[name]
        X, y = loader(data_home=data_home, download_if_missing=False, return_X_y=True)
        X = np.asarray(X).reshape(len(X), -1)
        if name == "usps":  # 300 images per digit
            rng = np.random.RandomState(0)
            keep = np.concatenate([rng.choice(np.flatnonzero(y == c), 300, replace=False)
                                   for c in np.unique(y)])
            X, y = X[keep], y[keep]
    elif name == "gauss":  # 60 classes in a 20-d subspace of 300-d, within-class spread in it
        X, y = gaussian_classes(n_classes=60, per_class=40, dim=300, rank=20, seed=1)
    elif name == "mkclass":
        from sklearn.datasets import make_classification
        X, y = make_classification(n_samples=3000, n_features=100, n_informative=30,
                                   n_redundant=20, n_classes=30, n_clusters_per_class=1,
                                   class_sep=2.0, random_state=0)
    else:
        raise ValueError(f"unknown data set {name!r}")
    return np.asarray(X, np.float32), np.asarray(y)


def gaussian_classes(n_classes, per_class, dim, rank, seed, noise=0.5, spread=0.8):
    rng = np.random.RandomState(seed)
    basis = np.linalg.qr(rng.randn(dim, rank))[0]
    centers = 1.5 * rng.randn(n_classes, rank)
    y = np.repeat(np.arange(n_classes), per_class)
    X = (centers[y] + spread * rng.randn(len(y), rank)) @ basis.T \
        + noise * rng.randn(len(y), dim)
    return X.astype(np.float32), y


#: Splits not used to choose the vector defaults (``--held-out``).
HELD_OUT = ["digits even -> odd", "usps seed 2", "usps seed 3", "make_classification 40",
            "coil20 seed 3"]
#: Splits drawn after ``loss="auto"`` chose the binomial loss for vectors (on the data sets
#: of ``DATASETS`` and checked on :data:`HELD_OUT`): never looked at before that choice.
HELD_OUT_LATER = ["digits 0-4 -> 5-9", "usps seed 4", "coil20 seed 6", "att seed 7",
                  "gauss seed 3", "make_classification 50"]
#: Splits drawn after the vector standardisation's common-unit threshold went from 10 to 100
#: (0.2): ``benchmarks._common.LATER_SYNTHETIC`` (make_classification layouts, the data the
#: change affects), never looked at before that change; their parameters reach the worker in
#: its spec.
def held_out_split(name, data_home, make_classification_params=None):
    """``(X, y, seen)`` of a split of :data:`HELD_OUT` (or of ``LATER_SYNTHETIC``, by its
    ``make_classification`` parameters)."""
    if make_classification_params is not None:
        from sklearn.datasets import make_classification
        X, y = make_classification(**make_classification_params)
        return X.astype(np.float32), y, y < make_classification_params["n_classes"] // 2
    if name == "digits even -> odd":
        X, y = load("digits", data_home)
        return X, y, y % 2 == 0
    if name == "digits 0-4 -> 5-9":
        X, y = load("digits", data_home)
        return X, y, y < 5
    if name == "gauss seed 3":
        X, y = gaussian_classes(n_classes=50, per_class=40, dim=200, rank=16, seed=3)
        return X, y, y < 25
    if name == "make_classification 50":
        from sklearn.datasets import make_classification
        X, y = make_classification(n_samples=3000, n_features=80, n_informative=25,
                                   n_redundant=15, n_classes=50, n_clusters_per_class=1,
                                   class_sep=2.2, random_state=9)
        return X.astype(np.float32), y, y < 25
    if name.startswith(("usps", "coil20", "att")):
        data, seed = name.split(" seed ")
        X, y = load(data, data_home)
        return X, y, seen_classes(y, int(seed))
    from sklearn.datasets import make_classification
    X, y = make_classification(n_samples=2400, n_features=60, n_informative=20,
                               n_redundant=10, n_classes=40, n_clusters_per_class=1,
                               class_sep=2.5, random_state=5)
    return X.astype(np.float32), y, y < 20


def seen_classes(y, seed):
    """The training half of a seeded permutation of the classes (the rest is unseen)."""
    classes = np.random.RandomState(seed).permutation(np.unique(y))
    return np.isin(y, classes[: len(classes) // 2])


# --------------------------------------------------------------------------- worker
def worker(spec):
    """One fit, described by ``spec`` (a dict): prints a JSON line with its scores and time."""
    import warnings
    warnings.filterwarnings("ignore")
    import torch

    from skdml.metrics import map_at_r, recall_at_k
    if spec["task"] == "speed":
        rng = np.random.RandomState(0)
        n, d = spec["n"], spec["d"]
        if spec["data"] == "uniform":
            X, y = rng.rand(n, d).astype(np.float32), rng.randint(0, 40, n)
        else:
            X, y = gaussian_classes(40, n // 40, d, 64, seed=0)
        from skdml import DeepMetricTransformer
        t, cpu = time.perf_counter(), time.process_time()
        est = DeepMetricTransformer(random_state=0).fit(X, y)
        print(json.dumps({"fit_s": time.perf_counter() - t, "cpu_s": time.process_time() - cpu,
                          "n_iter": int(est.n_iter_), "threads": torch.get_num_threads()}))
        return
    if spec["task"] == "held_out":
        X, y, seen = held_out_split(spec["data"], spec["data_home"],
                                    spec.get("make_classification"))
    else:
        X, y = load(spec["data"], spec["data_home"])
        seen = seen_classes(y, spec["seed"])
    Xtr, ytr, Xte, yte = X[seen], y[seen], X[~seen], y[~seen]
    method, info = spec["method"], {}
    t = time.perf_counter()
    if method == "raw":
        Z = Xte
    elif method == "pca64":
        from sklearn.decomposition import PCA
        Z = PCA(min(64, *Xtr.shape), random_state=0).fit(Xtr).transform(Xte)
    elif method == "ecaml":
        from skdml import ECAML
        Z = ECAML(random_state=spec["seed"]).fit(Xtr, ytr).transform(Xte)
    elif method == "deep":
        from skdml import DeepMetricTransformer
        est = DeepMetricTransformer(random_state=spec["seed"], device="cpu",
                                    **spec.get("params", {})).fit(Xtr, ytr)
        Z = est.transform(Xte)
        info["n_iter"] = int(est.n_iter_)
    else:
        raise ValueError(method)
    fit_s = time.perf_counter() - t
    print(json.dumps({"r1": float(recall_at_k(Z, yte, k=1)), "map_r": float(map_at_r(Z, yte)),
                      "fit_s": fit_s, **info}))


def run_worker(spec, checkout=None, timeout=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(checkout or ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(spec)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=str(ROOT))
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # cut: keep the CPU seconds it had used
        cpu = _cpu_seconds(proc.pid)
        proc.kill()
        proc.communicate()
        return {"timeout_s": timeout, "cpu_s_at_cut": cpu}
    if proc.returncode != 0:
        raise RuntimeError(stderr[-2000:])
    return json.loads(stdout.strip().splitlines()[-1])


def _cpu_seconds(pid):
    """User + system CPU seconds of a running process (Linux), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


# ---------------------------------------------------------------------------- tables
def header(args):
    import torch
    cmd = "python benchmarks/studies/bench_deep_vector.py " + " ".join(sys.argv[1:])
    return [f"Command: `{cmd}`", "",
            f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared with other jobs), "
            f"torch {torch.__version__}, {torch.get_num_threads()} torch threads by default; "
            f"each fit in its own process, one at a time.", ""]


def speed(args):
    rows, lines = [], header(args)
    lines += ["Wall seconds depend on the other jobs of the shared machine; CPU seconds (user +",
              "system, all threads) much less, so the ratio is given on both.", "",
              "| data | checkout | fit wall s | fit CPU s | epochs | new / baseline (wall, CPU) |",
              "|---|---|---|---|---|---|"]
    for data in ("uniform", "gaussian"):
        spec = {"task": "speed", "data": data, "n": args.n, "d": args.d}
        new = run_worker(spec, None, args.timeout)
        row = {"data": data, "new": new}
        if args.baseline and data == "uniform":  # the baseline's slow fit, once
            row["baseline"] = run_worker(spec, args.baseline, args.timeout)
        rows.append(row)
        for who in ("baseline", "new"):
            if who in row:
                r = row[who]
                cut = "timeout_s" in r
                wall = f"> {r['timeout_s']:.0f} (cut)" if cut else f"{r['fit_s']:.1f}"
                cpu = r.get("cpu_s_at_cut") if cut else r.get("cpu_s")
                cpu_cell = "-" if cpu is None else (f"> {cpu:.0f}" if cut else f"{cpu:.1f}")
                ratio = ""
                if who == "new" and "baseline" in row:
                    base = row["baseline"]
                    b_wall = base.get("timeout_s", base.get("fit_s"))
                    b_cpu = base.get("cpu_s_at_cut", base.get("cpu_s"))
                    ratio = f"{r['fit_s'] / b_wall:.3f}, " + (
                        f"{r['cpu_s'] / b_cpu:.3f}" if b_cpu else "-")
                    if "timeout_s" in base:
                        ratio += " (at most: the baseline was cut)"
                lines.append(f"| {data} {args.n}x{args.d} | {who} | {wall} | {cpu_cell} | "
                             f"{r.get('n_iter', '')} | {ratio} |")
                print(lines[-1], flush=True)
    save("deep_vector_speed" + args.suffix, lines, rows, args)


def study(args):
    rows, lines = [], header(args)
    lines += ["Class-disjoint halves (half of the classes train, the other half is retrieved), "
              f"seeds {args.seeds}; Recall@1 / MAP@R on the unseen half, mean over seeds; "
              "fit time in seconds (mean).", "",
              "| data | raw | PCA-64 | ECAML | deep (baseline) | deep (defaults) | "
              "fit s ECAML / baseline / deep |", "|---|---|---|---|---|---|---|"]
    methods = ["raw", "pca64", "ecaml", "deep"]
    for data in args.datasets:
        scores = {}
        for method in methods + (["baseline"] if args.baseline else []):
            per_seed = []
            for seed in args.seeds:
                spec = {"task": "study", "data": data, "method": method.replace(
                    "baseline", "deep"), "seed": seed, "data_home": args.data_home}
                per_seed.append(run_worker(spec, args.baseline if method == "baseline"
                                           else None, args.timeout))
            scores[method] = {k: float(np.mean([r[k] for r in per_seed]))
                              for k in per_seed[0]}
            print(data, method, scores[method], flush=True)
        rows.append({"data": data, **scores})

        def cell(m):
            s = scores.get(m)
            return "-" if s is None else f"{s['r1']:.3f} / {s['map_r']:.3f}"

        times = " / ".join(f"{scores[m]['fit_s']:.1f}" if m in scores else "-"
                           for m in ("ecaml", "baseline", "deep"))
        lines.append(f"| {data} | {cell('raw')} | {cell('pca64')} | {cell('ecaml')} | "
                     f"{cell('baseline')} | {cell('deep')} | {times} |")
    save("deep_vector" + args.suffix, lines, rows, args)


def held_out(args):
    sys.path.insert(0, str(ROOT))  # this process only (see LATER_SYNTHETIC above)
    from benchmarks._common import LATER_SYNTHETIC

    rows, lines = [], header(args)
    lines += ["Splits not used to choose the vector defaults; Recall@1 on the unseen classes "
              "(seed 0 for the fits). Splits marked * were drawn after the vector loss was "
              "chosen, ** after the common-unit threshold of the standardisation was.", "",
              "| split | raw | ECAML | deep (baseline) | deep (defaults) |",
              "|---|---|---|---|---|"]
    for name in HELD_OUT + HELD_OUT_LATER + list(LATER_SYNTHETIC):
        row = {"split": name}
        for method, checkout in [("raw", None), ("ecaml", None), ("baseline", args.baseline),
                                 ("deep", None)]:
            if method == "baseline" and not args.baseline:
                continue
            spec = {"task": "held_out", "data": name, "method": "deep" if method == "baseline"
                    else method, "seed": 0, "data_home": args.data_home,
                    "make_classification": LATER_SYNTHETIC.get(name)}
            row[method] = run_worker(spec, checkout, args.timeout)
        rows.append(row)
        cells = [f"{row[m]['r1']:.3f}" if m in row else "-"
                 for m in ("raw", "ecaml", "baseline", "deep")]
        mark = " *" if name in HELD_OUT_LATER else " **" if name in LATER_SYNTHETIC else ""
        lines.append(f"| {name}{mark} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    save("deep_vector_held_out" + args.suffix, lines, rows, args)


def save(stem, lines, rows, args):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _common import save as save_table  # provenance, and never over a file on disk

    text = "## Deep learner defaults on vector data\n\n" + "\n".join(lines)
    save_table(stem, text, {"rows": rows},
               threads="each fit in its own process, with the torch threads the table names")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--speed", action="store_true", help="time the 10000 x 4096 fit")
    parser.add_argument("--held-out", action="store_true",
                        help="splits not used to choose the defaults")
    parser.add_argument("--baseline", help="another checkout to compare with (its root)")
    parser.add_argument("--datasets", nargs="+", default=DATASETS, choices=DATASETS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--data-home", default=str(ROOT.parent / "shared" / "datasets"))
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--d", type=int, default=4096)
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds before a fit is cut (reported as such)")
    parser.add_argument("--suffix", default="", help="appended to the result file names")
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
    elif args.speed:
        speed(args)
    elif args.held_out:
        held_out(args)
    else:
        study(args)


if __name__ == "__main__":
    main()
