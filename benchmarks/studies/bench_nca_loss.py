"""Would a softmax-neighbour (NCA) loss serve ECAML's closed-set default on small sets?

On the smallest public sets of ``bench_external.py`` (GunPoint, ArrowHead, OSULeaf,
BasicMotions: 56-309 training samples) ``ECAML()`` trails scikit-learn's NCA or skdml's
LMNN. This study passes ECAML an NCA loss as a callable (``loss=nca_loss``, the public API
for any loss ``(embeddings, labels) -> scalar``): within a batch, each sample's probability
of picking a same-class neighbour under a softmax over minus the squared distances, the
loss the negative log of that probability, averaged (Goldberger et al., 2004), with the
Energy Confusion term off; and a scale-free form, whose squared distances are divided by
the batch's mean over 16 (the softmax's sharpness then does not depend on the data's
units). Batches of 8 (``n_samples_per_class`` "auto") or 32 samples a class. Against
``ECAML()`` and scikit-learn's NCA on those sets and on the sets the defaults were chosen on
(AT&T and COIL-20 after a PCA-100 fitted on the training split) or checked on before
(digits, wine, breast cancer). ``--splits`` x ``StratifiedShuffleSplit(test_size=0.3,
random_state=0)``, ``n_components = min(64, n_features, 0.7 n_samples)``, k-NN test
accuracy % at k=1 / k=10 and the median fit CPU seconds (one thread).

Usage::

    python benchmarks/studies/bench_nca_loss.py --data-dir /tmp/external   # ~5 min

(``--data-dir``: the folder ``bench_external.py --extract`` builds.) Writes
``results/nca_loss.{md,json}``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("SKDML_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.datasets import load_breast_cancer, load_digits, load_wine  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.model_selection import StratifiedShuffleSplit  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier, NeighborhoodComponentsAnalysis  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks._common import markdown_table, save  # noqa: E402
from skdml import ECAML  # noqa: E402

SHARED = ROOT.parent / "shared" / "datasets"
SMALL = ("GunPoint", "ArrowHead", "OSULeaf", "BasicMotions")
CHOSEN_ON = ("AT&T", "COIL-20")  # with USPS (too slow here), the closed-set defaults' sets
CHECKED = ("digits", "wine", "breast cancer")  # the earlier studies' checks


def nca_loss(embeddings, labels):
    """Mean ``-log p_i``, ``p_i`` the softmax probability that sample i picks a same-class
    neighbour in the batch (itself excluded); samples alone in their class are skipped."""
    n = len(labels)
    eye = torch.eye(n, dtype=torch.bool)
    d2 = torch.cdist(embeddings, embeddings).pow(2).masked_fill(eye, float("inf"))
    log_p = torch.log_softmax(-d2, dim=1)
    same = (labels[:, None] == labels[None, :]) & ~eye
    picked = torch.logsumexp(log_p.masked_fill(~same, float("-inf")), dim=1)
    return -picked[same.any(dim=1)].mean()


def scale_free_nca_loss(embeddings, labels, tau=16.0):
    """:func:`nca_loss` on squared distances divided by the batch's mean over ``tau`` (the
    softmax's sharpness then no longer depends on the data's scale)."""
    n = len(labels)
    eye = torch.eye(n, dtype=torch.bool)
    d2 = torch.cdist(embeddings, embeddings).pow(2)
    scale = d2.detach()[~eye].mean().clamp_min(1e-12) / tau
    log_p = torch.log_softmax(-(d2 / scale).masked_fill(eye, float("inf")), dim=1)
    same = (labels[:, None] == labels[None, :]) & ~eye
    picked = torch.logsumexp(log_p.masked_fill(~same, float("-inf")), dim=1)
    return -picked[same.any(dim=1)].mean()


METHODS = {
    "ECAML()": lambda n, s: ECAML(n, random_state=s),
    "ECAML, NCA loss": lambda n, s: ECAML(n, loss=nca_loss, regularizer_weight=0.0,
                                          random_state=s),
    "ECAML, NCA loss, 32 a class": lambda n, s: ECAML(n, loss=nca_loss, regularizer_weight=0.0,
                                                      n_samples_per_class=32, random_state=s),
    "ECAML, scale-free NCA loss, 32 a class": lambda n, s: ECAML(
        n, loss=scale_free_nca_loss, regularizer_weight=0.0, n_samples_per_class=32,
        random_state=s),
    "sklearn NCA": lambda n, s: NeighborhoodComponentsAnalysis(n, random_state=s),
}


def _load(name, data_dir):
    if name in SMALL:
        with np.load(Path(data_dir) / f"{name}.npz") as f:
            return f["X"].astype(np.float64), f["y"], False
    if name in ("AT&T", "COIL-20"):
        from skdml.datasets import load_att_faces, load_coil20
        load = load_att_faces if name == "AT&T" else load_coil20
        X, y = load(return_X_y=True, data_home=SHARED, download_if_missing=False)
        return X.reshape(len(X), -1).astype(np.float64), y, True
    loader = {"digits": load_digits, "wine": load_wine, "breast cancer": load_breast_cancer}
    X, y = loader[name](return_X_y=True)
    return X, y, False


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="bench_external.py --extract's folder")
    parser.add_argument("--sets", nargs="+", default=list(SMALL + CHOSEN_ON + CHECKED),
                        choices=list(SMALL + CHOSEN_ON + CHECKED))
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--name", default="nca_loss")
    args = parser.parse_args(argv)
    rows, records = [], []
    with threadpool_limits(1):
        for name in args.sets:
            X, y, reduce = _load(name, args.data_dir)
            n = min(64, X.shape[1], int(0.7 * len(y)))
            acc = {m: [] for m in METHODS}
            times = {m: [] for m in METHODS}
            splits = StratifiedShuffleSplit(args.splits, test_size=0.3, random_state=0)
            for s, (tr, te) in enumerate(splits.split(X, y)):
                X_tr, X_te = X[tr], X[te]
                if reduce:  # compare_linear.py's protocol for the face and object images
                    pca = PCA(100, random_state=0).fit(X_tr)
                    X_tr, X_te = pca.transform(X_tr), pca.transform(X_te)
                for m, make in METHODS.items():
                    t0 = time.process_time()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        est = make(n, s).fit(X_tr, y[tr])
                    times[m].append(time.process_time() - t0)
                    Z_tr, Z_te = est.transform(X_tr), est.transform(X_te)
                    acc[m].append([100 * KNeighborsClassifier(k).fit(Z_tr, y[tr]).score(
                        Z_te, y[te]) for k in (1, 10)])
            for m in METHODS:
                mean = np.mean(acc[m], axis=0)
                kind = ("defaults chosen on it" if name in CHOSEN_ON else
                        "checked before" if name in CHECKED else "small, new")
                rows.append([name, kind,
                             m, f"{mean[0]:.1f} / {mean[1]:.1f}", f"{np.median(times[m]):.2g}"])
                records.append({"data": name, "method": m, "acc": acc[m],
                                "fit_cpu_s": times[m]})
                print(" | ".join(rows[-1]), flush=True)
    text = "\n".join([
        "## ECAML with an NCA loss (a callable), on small new sets and on the sets the "
        "defaults were chosen on", "",
        f"{args.splits} x `StratifiedShuffleSplit(test_size=0.3, random_state=0)`; k-NN test "
        "accuracy % at k=1 / k=10 (mean of the splits); median fit CPU seconds (one thread); "
        "AT&T and COIL-20 after a PCA-100 fitted on the training split.", "",
        markdown_table(["data", "set", "method", "k=1 / k=10", "fit CPU s"], rows)])
    save(args.name, text, {"records": records, "splits": args.splits},
         threads="1 (BLAS, torch)")


if __name__ == "__main__":
    main()
