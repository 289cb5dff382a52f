"""MLKR's "auto" start on both workflows: closed-set k-NN (one stratified 70/30 split) and
unseen-class retrieval (two class-disjoint halves), digits and wine (vectors) and AT&T
PCA-100 (images). Run it with the tree to measure first on PYTHONPATH.

Usage: python benchmarks/studies/check_mlkr_start.py
"""
import argparse
import sys
import warnings

import numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
warnings.simplefilter("ignore")
from sklearn.datasets import load_digits, load_wine
from sklearn.preprocessing import StandardScaler
from sklearn.model_selection import StratifiedShuffleSplit
from sklearn.neighbors import KNeighborsClassifier
from skdml.linear import MLKR
from skdml.metrics import recall_at_k, map_at_r
from skdml.model_selection import ClassDisjointSplit
import compare_linear as cl  # noqa: E402
import skdml  # noqa: E402


def main(argv=None):
    print(skdml.__file__)
    argparse.ArgumentParser(description=__doc__).parse_args(argv)
    sets = {}
    X, y = load_digits(return_X_y=True); sets["digits (vectors)"] = (StandardScaler().fit_transform(X), y)
    X, y = load_wine(return_X_y=True); sets["wine (vectors)"] = (StandardScaler().fit_transform(X), y)
    Xa, ya, Xt, yt = cl.prepare("att", 1, 100)[0]; sets["AT&T PCA-100 (images)"] = (np.vstack([Xa, Xt]), np.concatenate([ya, yt]))
    for name, (X, y) in sets.items():
        out = []
        for s, (tr, te) in enumerate(ClassDisjointSplit(n_splits=2, random_state=0).split(X, y)):
            m = MLKR(max_iter=100).fit(X[tr], y[tr].astype(float))
            Z = m.transform(X[te])
            out.append((recall_at_k(Z, y[te], k=1)[1] if isinstance(recall_at_k(Z, y[te], k=1), dict) else recall_at_k(Z, y[te], k=1),
                        map_at_r(Z, y[te]), map_at_r(X[te], y[te])))
        tr, te = next(StratifiedShuffleSplit(1, test_size=0.3, random_state=0).split(X, y))
        m = MLKR(max_iter=100).fit(X[tr], y[tr].astype(float))
        acc = [KNeighborsClassifier(k).fit(m.transform(X[tr]), y[tr]).score(m.transform(X[te]), y[te]) for k in (1, 10)]
        print(f"{name}: unseen R@1 {np.mean([o[0] for o in out]):.3f} MAP@R {np.mean([o[1] for o in out]):.3f} (start MAP@R {np.mean([o[2] for o in out]):.3f}); closed-set k=1/10 {acc[0]:.3f}/{acc[1]:.3f}", flush=True)


if __name__ == "__main__":
    main()
