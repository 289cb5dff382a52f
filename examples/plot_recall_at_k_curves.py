"""
Recall@K of several methods on unseen classes
=============================================

:func:`~skdml.metrics.recall_at_k` takes a list of K and scores them from one
exact neighbour search. Here every method fits on the digits 0-4 (or, for PCA
and SUML, on their pixels without labels) and embeds the unseen digits 5-9;
the curves show the fraction of queries with a same-class neighbour among
their K nearest. :func:`~skdml.metrics.map_at_r` (MAP@R) is printed as well, as it
rewards putting *all* same-class points first.
"""

# %%
import matplotlib.pyplot as plt
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA
from sklearn.neighbors import NeighborhoodComponentsAnalysis

from skdml import ECAML, JRD, SUML
from skdml.metrics import map_at_r, recall_at_k

X, y = load_digits(return_X_y=True)
X = X / 16.0
seen = y < 5
X_train, y_train, X_test, y_test = X[seen], y[seen], X[~seen], y[~seen]

methods = {
    "raw pixels": None,
    "PCA (unsupervised)": PCA(n_components=16, random_state=0),
    "SUML (unsupervised)": SUML(n_components=16, random_state=0),
    "NCA (scikit-learn)": NeighborhoodComponentsAnalysis(n_components=16, max_iter=50,
                                                         random_state=0),
    # set for unseen classes: each keeps its PCA start unless a learned epoch retrieves
    # held-out digits of 0-4 better (on these pixels it keeps it: ECAML's and JRD's
    # curves lie on PCA's)
    "ECAML": ECAML(n_components=16, validation_split="class_disjoint", random_state=0),
    "JRD": JRD(n_components=16, validation_split="class_disjoint", random_state=0),
}
ks = [1, 2, 4, 8, 16, 32]
curves = {}
for name, est in methods.items():
    Z = X_test if est is None else est.fit(X_train, y_train).transform(X_test)
    curves[name] = recall_at_k(Z, y_test, k=ks)
    print(f"{name:>20}: Recall@1 {curves[name][1]:.3f}  MAP@R {map_at_r(Z, y_test):.3f}")

# %%
# The curves
# ----------
fig, ax = plt.subplots(figsize=(6, 4))
for name, scores in curves.items():
    ax.plot(ks, [scores[k] for k in ks], marker="o", label=name)
ax.set_xscale("log", base=2)
ax.set_xticks(ks, [str(k) for k in ks])
ax.set_xlabel("K")
ax.set_ylabel("Recall@K on unseen digits 5-9")
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
