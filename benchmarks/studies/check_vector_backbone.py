"""Plain MLP against MLP + skip (the default vector backbone) on digit splits not used to choose it.

The skip connection was chosen on digits 0-4 -> 5-9 and on wine / breast-cancer /
digits k-NN (``benchmarks/reports/deep.md``); this script checks it on two other zero-shot splits of
scikit-learn's digits: 5-9 -> 0-4 and even -> odd. ``n_components=16``, 2 seeds.

    python benchmarks/studies/check_vector_backbone.py

Writes ``benchmarks/results/vector_backbone_check.md``.
"""

import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import save  # noqa: E402
from skdml.deep import MLP, DeepMetricTransformer  # noqa: E402
from skdml.metrics import nmi_score, recall_at_k  # noqa: E402


def main(argv=None):
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float32)
    lines = ["## Vector backbone on digit splits not used to choose it", "",
             "Command: `python benchmarks/studies/check_vector_backbone.py`; machine "
             f"{platform.machine()}, {os.cpu_count()} CPUs; n_components=16, seeds 0 and 1 "
             "(mean).", "", "| split | backbone | R@1 | NMI |", "|---|---|---|---|"]
    for name, train in {"5-9 -> 0-4": y >= 5, "even -> odd": y % 2 == 0}.items():
        test = ~train
        lines.append(f"| {name} | raw pixels | {recall_at_k(X[test], y[test]):.3f} | "
                     f"{nmi_score(X[test], y[test], random_state=0):.3f} |")
        for label, skip in [("plain MLP", False), ("MLP + skip (default)", True)]:
            scores = []
            for seed in (0, 1):
                est = DeepMetricTransformer(backbone=MLP(64, hidden=(64, 64), skip=skip),
                                            n_components=16, random_state=seed)
                Z = est.fit(X[train], y[train]).transform(X[test])
                scores.append((recall_at_k(Z, y[test]), nmi_score(Z, y[test], random_state=0)))
            r1, nmi = np.mean(scores, axis=0)
            lines.append(f"| {name} | {label} | {r1:.3f} | {nmi:.3f} |")
    import torch

    save("vector_backbone_check", "\n".join(lines), {"lines": lines},
         threads=f"torch {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
