"""Shared plumbing for the benchmark scripts: data location, protocols, tables, plots.

Every script under ``benchmarks/`` prints its table and writes it, as Markdown
and JSON, with its plots, to ``benchmarks/results/`` (``$SKDML_RESULTS``: another
folder). A file already there is never replaced unless ``SKDML_BENCH_OVERWRITE=1``
(``run.py --overwrite``): the run's files then get its time stamp (see :func:`save`).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import StratifiedShuffleSplit
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: Set to 1 to let a run replace the files of the same name (published results included).
OVERWRITE = "SKDML_BENCH_OVERWRITE"
#: The read-only shared data sets, beside the project checkout (never copied into it).
SHARED_DATA = Path(os.environ.get("SKDML_DATA", ROOT.parent / "shared" / "datasets"))


#: ``make_classification`` keyword arguments of the synthetic sets drawn after the vector
#: standardisation's threshold and the linear defaults were settled (never looked at before):
#: informative and noise features of one unit. The first half of the classes train.
#: ``bench_deep_vector.py --held-out`` and ``bench_linear_unseen.py`` (``synth3``-``synth5``).
LATER_SYNTHETIC = {
    "make_classification 60": dict(n_samples=3600, n_features=150, n_informative=40,
                                   n_redundant=10, n_classes=60, n_clusters_per_class=1,
                                   class_sep=1.8, random_state=21),
    "make_classification 36 repeated": dict(n_samples=2160, n_features=64, n_informative=16,
                                            n_redundant=8, n_repeated=4, n_classes=36,
                                            n_clusters_per_class=1, class_sep=2.0,
                                            random_state=33),
    "make_classification 40 two clusters": dict(n_samples=3200, n_features=100,
                                                n_informative=30, n_redundant=10, n_classes=40,
                                                n_clusters_per_class=2, class_sep=2.5,
                                                random_state=44),
}


def load(name):
    """Load ``"att"``, ``"coil20"`` or ``"usps"`` from the shared data folder as (X, y)."""
    from skdml import datasets

    loader = {"att": datasets.load_att_faces, "coil20": datasets.load_coil20,
              "usps": datasets.load_usps}[name]
    return loader(data_home=SHARED_DATA, download_if_missing=False, return_X_y=True)


def knn_protocol(estimators, X, y, *, n_splits=10, ks=(1, 3, 10, 20), test_size=0.3,
                 random_state=0, verbose=True):
    """The SUML paper's Table 1 protocol.

    ``n_splits`` random stratified 70/30 splits; each estimator (a transformer,
    or ``None`` for the raw Euclidean baseline) is fitted on the training part,
    then a k-NN classifier for each k in ``ks`` is scored on the test part.

    Returns
    -------
    results : dict
        ``results[name] = {"acc": {k: [per-split accuracies]}, "fit_s": [seconds]}``.
    """
    splitter = StratifiedShuffleSplit(n_splits=n_splits, test_size=test_size,
                                      random_state=random_state)
    results = {name: {"acc": {k: [] for k in ks}, "fit_s": []} for name in estimators}
    for split, (tr, te) in enumerate(splitter.split(X, y)):
        for name, est in estimators.items():
            t0 = time.perf_counter()
            if est is None:
                Ztr, Zte = X[tr], X[te]
            else:
                fitted = clone(est).fit(X[tr], y[tr])
                Ztr, Zte = fitted.transform(X[tr]), fitted.transform(X[te])
            results[name]["fit_s"].append(time.perf_counter() - t0)
            for k in ks:
                knn = KNeighborsClassifier(n_neighbors=k).fit(Ztr, y[tr])
                results[name]["acc"][k].append(float(knn.score(Zte, y[te])))
            if verbose:
                accs = " ".join(f"k={k}:{results[name]['acc'][k][-1]:.3f}" for k in ks)
                print(f"  split {split} {name:>12s} fit {results[name]['fit_s'][-1]:7.2f}s {accs}",
                      flush=True)
    return results


def mean_std(values, scale=100.0):
    """Format a list as ``mean ± std`` (in percent by default)."""
    values = np.asarray(values, dtype=float) * scale
    return f"{values.mean():.2f} ± {values.std():.2f}"


def markdown_table(header, rows):
    """Render a Markdown table from a header list and a list of row lists."""
    lines = ["| " + " | ".join(map(str, header)) + " |",
             "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def is_quick(argv=None):
    """Whether this run is a ``--quick`` smoke run (read from the command line)."""
    return "--quick" in (sys.argv[1:] if argv is None else argv)


def provenance():
    """Machine, thread counts and command of this run, for every results table."""
    from threadpoolctl import threadpool_info

    try:
        import torch
        torch_threads = torch.get_num_threads()
    except ImportError:  # pragma: no cover
        torch_threads = None
    blas = sorted({pool["num_threads"] for pool in threadpool_info()
                   if pool.get("user_api") == "blas"})
    script = Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(ROOT)
    except ValueError:
        pass
    return {
        "command": shlex.join(["python", str(script), *sys.argv[1:]]),  # pasteable as is
        "machine": f"{platform.platform()}, {os.cpu_count()} logical CPUs "
                   f"({platform.processor() or platform.machine()}), no GPU used"
                   if not _cuda() else f"{platform.platform()}, {os.cpu_count()} CPUs, CUDA ({_gpu_name()})",
        "torch_threads": torch_threads,
        "blas_threads": blas,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _gpu_name():
    import torch

    return f"{torch.cuda.get_device_name()}, torch {torch.__version__}"


def _cuda():
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        return False


def results_dir():
    """The folder runs write to: ``$SKDML_RESULTS`` (from the current folder), else
    ``benchmarks/results/``."""
    return Path(os.environ.get("SKDML_RESULTS") or RESULTS).resolve()


def _relink(markdown, renamed):
    """Image links of ``markdown`` follow figures renamed ``old -> new``."""
    for old, new in renamed:
        markdown = re.sub(rf"\({re.escape(old)}\.png\)", f"({new}.png)", markdown)
    return markdown


def unclaimed(folder, stem_pairs, suffixes):
    """``stem_pairs`` (``(kind, stem)``) unchanged, or each stem with this run's time stamp.

    Unchanged when ``SKDML_BENCH_OVERWRITE=1`` or when none of the files they name exists;
    else every stem gets ``.<UTC time stamp>``, so that a rerun never replaces a result on
    disk without being asked to, and its files stay together.
    """
    def taken(pairs):
        return [path for kind, stem in pairs for path in
                (folder / f"{stem}{suffix}" for suffix in suffixes[kind]) if path.exists()]

    first = taken(stem_pairs)
    if not first or os.environ.get(OVERWRITE) == "1":
        return stem_pairs
    stamp = base = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    for n in range(2, 1000):  # two runs in one second: the second gets "-2"
        if not taken([(kind, f"{stem}.{stamp}") for kind, stem in stem_pairs]):
            break
        stamp = f"{base}-{n}"
    print(f"{first[0]} exists: this run writes its files with '.{stamp}' before the "
          f"extension, beside the ones there (set {OVERWRITE}=1, or pass run.py "
          "--overwrite, to replace them).", file=sys.stderr)
    return [(kind, f"{stem}.{stamp}") for kind, stem in stem_pairs]


def _footer_y(fig):
    """A figure-fraction height just below everything drawn (rotated tick labels included)."""
    try:
        box = fig.get_tightbbox(fig.canvas.get_renderer())
        return min(box.y0 / fig.get_figheight(), 0.0) - 0.01
    except Exception:  # noqa: BLE001 - a backend without a renderer: the old place
        return -0.01


def save(name, markdown, data, figures=(), *, quick=None, threads=None, replace=False):
    """Print ``markdown`` and write ``<name>.md``, ``<name>.json`` and figures; return the paths.

    Into :func:`results_dir`. Every table gets a provenance line (command, machine,
    thread counts): the process's torch and BLAS thread counts, or ``threads`` (a
    phrase) for a script whose fits run under their own limits. A ``--quick`` run
    (``quick=None`` reads the command line) writes ``<name>_quick.*`` and
    ``<figure>_quick.png`` so that it never overwrites the published results; and
    no run replaces a file that exists unless ``SKDML_BENCH_OVERWRITE=1`` (see
    :func:`unclaimed`) or ``replace`` (a script that extends its own table in place,
    as the user asked: ``bench_deep_seeds.py``).
    """
    quick = is_quick() if quick is None else quick
    suffix = "_quick" if quick else ""

    def tag(n):
        # a figure named after a quick run's name ("x_quick_gaps") is tagged already
        return n if not quick or "_quick" in n else n + suffix

    folder = results_dir()
    tagged = [("table", tag(name))] + [("figure", tag(fig_name)) for fig_name, _ in figures]
    final = tagged if replace else \
        unclaimed(folder, tagged, {"table": (".md", ".json"), "figure": (".png",)})
    # image links in the Markdown follow the renamed figures
    markdown = _relink(markdown, [(old, new) for (old, _), (_, new) in zip(figures, final[1:])])
    name = final[0][1]
    figures = [(new, fig) for (_, new), (_, fig) in zip(final[1:], figures)]
    prov = provenance()
    if threads is not None:
        prov["threads"] = threads
    thread_line = threads if threads is not None else \
        f"torch {prov['torch_threads']}, BLAS {prov['blas_threads']}"
    markdown = (f"_Command:_ `{prov['command']}`  \n_Machine:_ {prov['machine']} "
                "(shared with other jobs: absolute times are pessimistic)  \n"
                f"_Threads:_ {thread_line}; {prov['date']}\n\n" + markdown)
    if isinstance(data, dict):
        data = {"provenance": prov, **data}
    folder.mkdir(parents=True, exist_ok=True)
    print(markdown)
    written = [folder / f"{name}.md", folder / f"{name}.json"]
    written[0].write_text(markdown + "\n")
    written[1].write_text(json.dumps(data, indent=2, default=_jsonable) + "\n")
    for fig_name, fig in figures:  # every plot names its command, machine and threads
        fig.text(0.0, _footer_y(fig), f"{prov['command']}\n{prov['machine']}; threads: "
                 f"{thread_line}; {prov['date']}", fontsize=6, color="0.35", va="top",
                 ha="left", transform=fig.transFigure)
        written.append(folder / f"{fig_name}.png")
        fig.savefig(written[-1], dpi=120, bbox_inches="tight")
    return written


def _jsonable(obj):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def pipeline(est):
    """A learner followed by 1-NN, for quick sanity checks."""
    return make_pipeline(est, KNeighborsClassifier(1))
