"""The deep learner's outputs beyond a narrow input's width: zero at the start, or random?

The default vector network's head starts as the identity on the input's principal
coordinates and zero elsewhere, so before training the embedding is the input's leading
principal components (``skdml.deep._network.identity_start``). Where ``n_components``
(128 by default) exceeds those coordinates (13 on wine), the extra outputs are 0 for every
sample, and no distance loss has a gradient for them: they stay 0. This study fills them
with small random weights instead (``--eps`` times the default scale, seeded) and compares
closed-set k-NN accuracy (2 stratified 70/30 splits, k = 1 / 10) on wine, breast cancer and
digits, with the number of all-zero output columns. ``--eps 0`` is the default.

Usage::

    python benchmarks/studies/bench_deep_extra_outputs.py            # eps 0 and 0.1, ~1 min

Writes ``results/deep_extra_outputs.{md,json}``.
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
from sklearn.model_selection import StratifiedShuffleSplit  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
from _common import markdown_table, save  # noqa: E402

import skdml.deep._network as network  # noqa: E402
import skdml.deep._trainer as trainer  # noqa: E402
from skdml import DeepMetricTransformer  # noqa: E402

SETS = {"wine": load_wine, "breast cancer": load_breast_cancer, "digits": load_digits}


def start_with(eps):
    """``identity_start``, then the rows beyond the input's width drawn at ``eps`` scale."""
    def start(net):
        net = network.identity_start(net)
        head, n_in = net.head, getattr(net.backbone, "in_features", None)
        if eps > 0 and isinstance(head, torch.nn.Linear) and n_in is not None \
                and head.out_features > n_in:
            with torch.no_grad():
                g = torch.Generator().manual_seed(0)
                w = torch.randn(head.out_features - n_in, head.in_features, generator=g)
                head.weight[n_in:] = eps * w / head.in_features ** 0.5
        return net
    return start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--eps", type=float, nargs="+", default=[0.0, 0.1])
    args = parser.parse_args(argv)
    rows, data = [], {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for eps in args.eps:
            trainer.identity_start = start_with(eps)
            for name, load in SETS.items():
                X, y = load(return_X_y=True)
                accs, zero, c0 = [], [], time.process_time()
                for tr, te in StratifiedShuffleSplit(2, test_size=0.3,
                                                     random_state=0).split(X, y):
                    model = DeepMetricTransformer(random_state=0).fit(X[tr], y[tr])
                    Zt, Ze = model.transform(X[tr]), model.transform(X[te])
                    zero.append(int((np.abs(Zt).max(axis=0) == 0).sum()))
                    accs.append([KNeighborsClassifier(k).fit(Zt, y[tr]).score(Ze, y[te])
                                 for k in (1, 10)])
                acc = 100 * np.mean(accs, axis=0)
                data[f"{name}, eps {eps:g}"] = {"acc": accs, "zero_columns": zero}
                rows.append([name, f"{eps:g}", f"{acc[0]:.1f} / {acc[1]:.1f}",
                             ", ".join(map(str, zero)), f"{time.process_time() - c0:.1f}"])
                print(rows[-1], flush=True)
    md = ("## The deep learner's outputs beyond a narrow input's width\n\n"
          "`DeepMetricTransformer(random_state=0)` (128 components), 2 x "
          "`StratifiedShuffleSplit(test_size=0.3, random_state=0)`; k-NN test accuracy % at "
          "k=1 / k=10 (mean of the splits), all-zero output columns per split, CPU s. eps 0: "
          "the default start (extra outputs 0); eps > 0: those rows drawn at that fraction "
          "of the default scale.\n\n"
          + markdown_table(["data", "eps", "k=1 / k=10", "zero columns", "CPU s"], rows))
    save("deep_extra_outputs", md, data, threads="1 (SKDML_NUM_THREADS)")


if __name__ == "__main__":
    main()
