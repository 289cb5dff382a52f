"""Fits and scores whose bits must not move when no default moves: save them, compare two runs.

Fifteen results on one thread: ECAML and JRD on standardised digits and wine, a deep fit of
two epochs on 400 digits, SUML, the classic learners (MLKR, LMNN, ITML, LSML, MMC, SCML) on
standardised wine, few-shot accuracy, MAP@R at an offset and Recall@K.

Usage::

    PYTHONPATH=/tmp/old python benchmarks/studies/bit_identity.py --save /tmp/before.npz
    python benchmarks/studies/bit_identity.py --save /tmp/after.npz
    python benchmarks/studies/bit_identity.py --compare /tmp/before.npz /tmp/after.npz
"""

from __future__ import annotations

import argparse
import os
import warnings

import numpy as np


def results():
    from sklearn.datasets import load_digits, load_wine
    from sklearn.preprocessing import StandardScaler

    from skdml import ECAML, JRD, SUML, DeepMetricTransformer
    from skdml.linear import (ITML_Supervised, LMNN, LSML_Supervised, MLKR, MMC_Supervised,
                              SCML_Supervised)
    from skdml.metrics import few_shot_accuracy, map_at_r, recall_at_k

    out = {}
    for name, loader in (("digits", load_digits), ("wine", load_wine)):
        X, y = loader(return_X_y=True)
        X = StandardScaler().fit_transform(X)
        out[f"ecaml_{name}"] = ECAML(random_state=0).fit(X[::2], y[::2]).components_
        out[f"jrd_{name}"] = JRD(random_state=0).fit(X[::2], y[::2]).components_
    X, y = load_digits(return_X_y=True)
    X, y = X[:400].astype(np.float32), y[:400]
    out["deep"] = DeepMetricTransformer(max_iter=2, random_state=0, device="cpu").fit(
        X, y).transform(X)
    out["suml"] = SUML(n_components=8, random_state=0, max_iter=20).fit(X).components_
    Xw, yw = load_wine(return_X_y=True)
    Xw = StandardScaler().fit_transform(Xw)
    out["mlkr"] = MLKR().fit(Xw, yw).components_
    out["lmnn"] = LMNN(random_state=0).fit(Xw, yw).components_
    out["itml"] = ITML_Supervised(random_state=0).fit(Xw, yw).components_
    out["lsml"] = LSML_Supervised(random_state=0).fit(Xw, yw).components_
    out["mmc"] = MMC_Supervised(random_state=0).fit(Xw, yw).components_
    out["scml"] = SCML_Supervised(random_state=0, max_iter=2000).fit(Xw, yw).components_
    out["fewshot"] = np.array(few_shot_accuracy(Xw, yw, n_way=3, n_shot=1, n_queries=5,
                                                n_episodes=30, random_state=0))
    out["mapr"] = np.array(map_at_r(Xw * 1e5 + 3, yw))
    recall = recall_at_k(Xw, yw, k=[1, 2, 4])
    out["recall"] = np.array(list(recall.values()) if isinstance(recall, dict) else recall)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", metavar="NPZ", help="run the fits and save their results")
    group.add_argument("--compare", nargs=2, metavar="NPZ", help="compare two saved runs")
    args = parser.parse_args(argv)
    if args.save:
        os.environ["SKDML_NUM_THREADS"] = "1"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            np.savez(args.save, **results())
        return
    a, b = (np.load(path) for path in args.compare)
    moved = [k for k in a.files if k not in b.files or not np.array_equal(a[k], b[k])]
    print(f"{len(a.files) - len(moved)} of {len(a.files)} identical; moved: {moved}")


if __name__ == "__main__":
    main()
