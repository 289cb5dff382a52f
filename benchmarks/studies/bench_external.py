"""The linear defaults on public sets that played no part in choosing them, both tasks.

Issue 35 checks the closed-set defaults "on data sets you do not have". This study runs
them on eight public classification sets that no default of skdml was chosen on, taken
from packages on PyPI (so it runs offline from a package mirror):

* UCR time series as vectors (sktime 1.2.0's wheel ships them): ACSF1 (10 appliances,
  1,460 readings), ArrowHead (3 shapes, 251), GunPoint (2, 150), ItalyPowerDemand (2, 24),
  OSULeaf (6 leaf outlines, 427), BasicMotions (4 motions, 6 x 100 accelerometer and
  gyroscope readings, flattened);
* Palmer penguins (3 species, 4 measurements in millimetres and grams: mixed units);
* MNIST, mlxtend's 5,000-digit sample (784 pixels in 0-255).

**Closed set** (the users' first workflow): ``--n-splits`` x
``StratifiedShuffleSplit(test_size=0.3, random_state=0)``, ``make_pipeline(method,
KNeighborsClassifier(k))`` with ``n_components = min(64, n_features, n_train - 1)``, k-NN
test accuracy % at k=1 / k=10 (mean of the splits) and the median fit CPU seconds (one thread),
for
PCA, scikit-learn's NCA, skdml's LMNN (k=3) and ITML (metric-learn's rivals of issue 35, as
skdml's ports; on inputs wider than 100 features after a PCA-100 fitted on the training
split, the protocol of ``benchmarks/compare_linear.py``), ``ECAML()`` and ``JRD()``.

**Unseen classes** (sets of 6 classes or more): the first half of the classes train
(``validation_split="class_disjoint"``, 16 dimensions), the other half are scored by
leave-one-out Recall@1 and MAP@R among themselves, against the PCA start. ``--few-classes``:
the same after training on 3 classes only (digits, OSULeaf, ACSF1, an 8-class
``make_classification``), too few for a class-disjoint hold-out; ``--few-classes 4``, on 4.

Usage::

    python benchmarks/studies/bench_external.py --extract /tmp/external   # once, ~1 min
    python benchmarks/studies/bench_external.py --data-dir /tmp/external  # ~12 min, 2 cores
    PYTHONPATH=/tmp/old python benchmarks/studies/bench_external.py --data-dir /tmp/external \
        --methods "ECAML()" "JRD()" --name external_old   # another tree's skdml
    python benchmarks/studies/bench_external.py --data-dir /tmp/external --few-classes \
        --name external_few_classes   # unseen classes after training on 3 (~1 min)
    python benchmarks/studies/bench_external.py --data-dir /tmp/external --few-classes 4 \
        --name external_four_classes  # on 4: the fewest a class-disjoint hold-out allows

``--extract`` downloads sktime's wheel (``pip download --no-deps sktime==1.2.0``, read as a
zip, never installed) and installs palmerpenguins and mlxtend into a throw-away virtual
environment under the target folder; neither is a dependency of skdml. Writes
``results/external.{md,json}`` (or ``--name``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
from pathlib import Path

os.environ.setdefault("SKDML_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.model_selection import StratifiedShuffleSplit  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier, NeighborhoodComponentsAnalysis  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._common import markdown_table, save  # noqa: E402
from skdml import ECAML, JRD  # noqa: E402
from skdml.linear import ITML_Supervised, LMNN  # noqa: E402
from skdml.metrics import map_at_r, recall_at_k  # noqa: E402

UCR = ("ACSF1", "ArrowHead", "GunPoint", "ItalyPowerDemand", "OSULeaf", "BasicMotions")
SETS = UCR + ("penguins", "mnist5000")
#: Inputs wider than this reach the rivals LMNN and ITML through a PCA fitted on the
#: training split (``compare_linear.py``'s protocol; ITML learns a d x d matrix), of at most
#: the training samples less one dimensions.
RIVAL_WIDTH = 100


def _rival(make):
    def build(n, s, shape):
        n_train, d = shape
        est = make(n, s)
        if d <= RIVAL_WIDTH:
            return est
        # at most n_train - 1 components: the centred training data have no more
        return make_pipeline(PCA(min(RIVAL_WIDTH, n_train - 1), random_state=s), est)
    return build


METHODS = {
    "PCA": lambda n, s, shape: PCA(n, random_state=s),
    "sklearn NCA": lambda n, s, shape: NeighborhoodComponentsAnalysis(n, random_state=s),
    "skdml LMNN (k=3)": _rival(lambda n, s: LMNN(n, n_neighbors=3, random_state=s)),
    "skdml ITML": _rival(lambda n, s: ITML_Supervised(random_state=s)),
    "ECAML()": lambda n, s, shape: ECAML(n, random_state=s),
    "JRD()": lambda n, s, shape: JRD(n, random_state=s),
}
RIVALS = ("sklearn NCA", "skdml LMNN (k=3)", "skdml ITML")


# ------------------------------------------------------------------------------- extraction
def _read_ts(text):
    """A fixed-length ``.ts`` file (sktime's format) as rows of floats and labels."""
    X, y, data = [], [], False
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.lower().startswith("@data"):
            data = True
        elif data:
            *dims, label = line.split(":")
            X.append(np.concatenate([np.array(d.split(","), dtype=float) for d in dims]))
            y.append(label)
    return X, y


def extract(target):
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "sktime==1.2.0", "-d", tmp], check=True)
        wheel = zipfile.ZipFile(next(Path(tmp).glob("sktime-*.whl")))
        for name in UCR:
            X, y = [], []
            for part in ("TRAIN", "TEST"):
                rows, labels = _read_ts(wheel.read(
                    f"sktime/datasets/data/{name}/{name}_{part}.ts").decode())
                X += rows
                y += labels
            np.savez(target / f"{name}.npz", X=np.vstack(X),
                     y=np.unique(y, return_inverse=True)[1])
    env = target / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    python = str(env / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "numpy", "palmerpenguins", "mlxtend"],
                   check=True)
    subprocess.run([python, "-c", f"""
import numpy as np, palmerpenguins, mlxtend.data
cols = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
p = palmerpenguins.load_penguins().dropna(subset=cols)
np.savez({str(target / 'penguins.npz')!r}, X=p[cols].to_numpy(float),
         y=np.unique(p["species"].to_numpy(), return_inverse=True)[1])
X, y = mlxtend.data.mnist_data()
np.savez({str(target / 'mnist5000.npz')!r}, X=X.astype(float), y=y)
"""], check=True)
    for name in SETS:
        with np.load(target / f"{name}.npz") as f:
            print(f"{name}: X {f['X'].shape}, classes {np.bincount(f['y']).tolist()}")


# ------------------------------------------------------------------------------- studies
def _load(data_dir, name):
    with np.load(Path(data_dir) / f"{name}.npz") as f:
        return f["X"].astype(np.float64), f["y"]


def closed_set(data_dir, names, methods, n_splits):
    rows, records = [], []
    for name in names:
        X, y = _load(data_dir, name)
        splits = StratifiedShuffleSplit(n_splits, test_size=0.3, random_state=0).split(X, y)
        acc = {m: [] for m in methods}
        times = {m: [] for m in methods}
        for s, (tr, te) in enumerate(splits):
            # the rank of the centred training data bounds the PCA (and the rivals' input)
            n = min(64, X.shape[1], len(tr) - 1)
            for m in methods:
                est = METHODS[m](n, s, (len(tr), X.shape[1]))
                t0 = time.process_time()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    Z = est.fit(X[tr], y[tr])
                times[m].append(time.process_time() - t0)
                Ztr, Zte = Z.transform(X[tr]), Z.transform(X[te])
                acc[m].append([100 * KNeighborsClassifier(k).fit(Ztr, y[tr]).score(Zte, y[te])
                               for k in (1, 10)])
                print(f"  {name} split {s} {m}: {acc[m][-1][0]:.1f} / {acc[m][-1][1]:.1f} "
                      f"({times[m][-1]:.1f} s)", flush=True)
        best = np.max([np.mean(acc[r], axis=0) for r in RIVALS if r in methods], axis=0) \
            if any(r in methods for r in RIVALS) else None
        for m in methods:
            mean = np.mean(acc[m], axis=0)
            mark = ""
            if best is not None and m in ("ECAML()", "JRD()"):
                mark = " ".join("ok" if a >= b - 1e-9 else f"-{b - a:.1f}"
                                for a, b in zip(mean, best))
            rows.append([name, f"{X.shape[0]} x {X.shape[1]}, {len(np.unique(y))} classes", m,
                         f"{mean[0]:.1f} / {mean[1]:.1f}", f"{np.median(times[m]):.2g}", mark])
            records.append({"data": name, "method": m, "acc": acc[m], "fit_cpu_s": times[m]})
    return rows, records


def unseen(data_dir, names):
    rows, records = [], []
    for name in names:
        X, y = _load(data_dir, name)
        classes = np.unique(y)
        if classes.size < 6:
            continue
        train = np.isin(y, classes[: classes.size // 2])
        n = min(16, X.shape[1])
        for label, est in (("PCA", PCA(n, random_state=0)),
                           ("ECAML (class_disjoint)", ECAML(n, validation_split="class_disjoint",
                                                            random_state=0)),
                           ("JRD (class_disjoint)", JRD(n, validation_split="class_disjoint",
                                                        random_state=0))):
            t0 = time.process_time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(X[train], y[train])
            fit_s = time.process_time() - t0
            Z = est.transform(X[~train])
            r1, mr = float(recall_at_k(Z, y[~train], k=1)), float(map_at_r(Z, y[~train]))
            kept = getattr(est, "best_iteration_", None)
            rows.append([name, label, f"{r1:.3f} / {mr:.3f}", f"{fit_s:.2g}",
                         "" if kept is None else str(kept)])
            records.append({"data": name, "method": label, "recall_at_1": r1, "map_at_r": mr,
                            "best_iteration": kept})
            print(f"  unseen {name} {label}: {r1:.3f} / {mr:.3f}", flush=True)
    return rows, records


#: ``--few-classes N``: the training classes of each set (digits, the two UCR sets, the
#: 8-class ``make_classification``) for 3 (too few for a class-disjoint hold-out) and 4 (the
#: fewest that allow one: 2 held out, 2 to train).
FEW_CLASSES = {
    3: {"digits": ([0, 1, 2], [3, 4, 5], [6, 7, 8], [1, 5, 9]),
        "UCR": ([0, 1, 2], [3, 4, 5]), "make_classification": ([0, 1, 2], [5, 6, 7])},
    4: {"digits": ([0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9], [1, 3, 5, 9]),
        "UCR": ([0, 1, 2, 3], [2, 3, 4, 5]), "make_classification": ([0, 1, 2, 3], [4, 5, 6, 7])},
}


def few_classes(data_dir, n_train_classes=3):
    """Unseen classes after training on 3 classes (too few for a class-disjoint hold-out)
    or 4 (the fewest that allow one)."""
    from sklearn.datasets import load_digits, make_classification

    plan = FEW_CLASSES[n_train_classes]
    X_digits, y_digits = load_digits(return_X_y=True)
    X_mkc, y_mkc = make_classification(1200, 40, n_informative=20, n_classes=8,
                                       n_clusters_per_class=1, random_state=3)
    cases = [("digits", X_digits, y_digits, train) for train in plan["digits"]]
    for name in ("OSULeaf", "ACSF1"):
        X, y = _load(data_dir, name)
        cases += [(name, X, y, train) for train in plan["UCR"]]
    cases += [("make_classification 8 classes", X_mkc, y_mkc, train)
              for train in plan["make_classification"]]
    rows, records = [], []
    for name, X, y, classes in cases:
        train = np.isin(y, classes)
        row = [name, " ".join(map(str, classes))]
        for label, est in (("PCA", PCA(16, random_state=0)),
                           ("ECAML", ECAML(16, validation_split="class_disjoint",
                                           random_state=0)),
                           ("JRD", JRD(16, validation_split="class_disjoint", random_state=0))):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(X[train], y[train])
            Z = est.transform(X[~train])
            r1, mr = float(recall_at_k(Z, y[~train], k=1)), float(map_at_r(Z, y[~train]))
            row.append(f"{r1:.3f} / {mr:.3f}")
            records.append({"data": name, "train_classes": classes, "method": label,
                            "recall_at_1": r1, "map_at_r": mr})
        rows.append(row)
        print("  few classes:", " | ".join(row), flush=True)
    return rows, records


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--extract", metavar="DIR", help="build the sets' npz files in DIR")
    parser.add_argument("--data-dir", help="folder of the npz files (see --extract)")
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS),
                        help="closed-set methods")
    parser.add_argument("--n-splits", type=int, default=5)
    parser.add_argument("--no-unseen", action="store_true")
    parser.add_argument("--no-closed", action="store_true",
                        help="skip the closed-set study (the unseen-class one runs on the "
                             "sets of 6 classes or more)")
    parser.add_argument("--few-classes", type=int, nargs="?", const=3, choices=sorted(FEW_CLASSES),
                        help="only the unseen-class fits after training on 3 classes (or 4), "
                             "its own sets and methods: the other options are ignored")
    parser.add_argument("--name", default="external")
    args = parser.parse_args(argv)
    if args.extract:
        extract(args.extract)
        return
    if not args.data_dir:
        parser.error("--data-dir is required (build it once with --extract DIR)")
    t0 = time.time()
    if args.few_classes:
        with threadpool_limits(1):
            rows, records = few_classes(args.data_dir, args.few_classes)
        import skdml
        save(args.name, "\n".join([
            f"## Unseen classes after training on {args.few_classes} classes, "
            "`validation_split=\"class_disjoint\"`",
            "", "Leave-one-out Recall@1 / MAP@R among the classes not trained on, 16 "
            f"dimensions, against PCA fitted on the {args.few_classes} training classes.", "",
            markdown_table(["data", "training classes", "PCA", "ECAML", "JRD"], rows), "",
            f"skdml from `{Path(skdml.__file__).parents[1]}`."]),
            {"records": records}, threads="1 (BLAS, torch)")
        return
    with threadpool_limits(1):
        closed_rows, closed_records = ([], []) if args.no_closed else \
            closed_set(args.data_dir, args.sets, args.methods, args.n_splits)
        unseen_rows, unseen_records = ([], []) if args.no_unseen else \
            unseen(args.data_dir, args.sets)
    lines = ["## The linear defaults on public sets not used to choose them"]
    if closed_rows:
        lines += [
            "",
            f"### Closed set: {args.n_splits} x `StratifiedShuffleSplit(test_size=0.3, "
            "random_state=0)`, `n_components = min(64, n_features, n_train - 1)`",
            "",
            "k-NN test accuracy % at k=1 / k=10 (mean of the splits), median fit CPU seconds "
            "(one thread). Last column, for ECAML and JRD: `ok` where at or above the best of "
            "NCA, LMNN and ITML, else the gap in points. LMNN and ITML see inputs wider than 100 "
            "features through a PCA-100 fitted on the training split (at most the training "
            "samples less one dimensions).",
            "",
            markdown_table(["data", "size", "method", "k=1 / k=10", "fit CPU s",
                            "vs best rival (k=1, k=10)"], closed_rows),
        ]
    if unseen_rows:
        lines += [
            "",
            "### Unseen classes: the first half of the classes train, the rest are scored",
            "",
            "Leave-one-out Recall@1 / MAP@R among the unseen classes, 16 dimensions; "
            "`best_iteration_` 0 means the learner kept its PCA start.",
            "",
            markdown_table(["data", "method", "Recall@1 / MAP@R", "fit CPU s",
                            "best_iteration_"], unseen_rows),
        ]
    import skdml
    lines += ["", f"skdml from `{Path(skdml.__file__).parents[1]}`. Total time "
              f"{time.time() - t0:.0f} s."]
    save(args.name, "\n".join(lines),
         {"closed": closed_records, "unseen": unseen_records, "n_splits": args.n_splits},
         threads="1 (BLAS, torch)")


if __name__ == "__main__":
    main()
