"""
Zero-shot retrieval: raw pixels against a learned metric
========================================================

Metric learning is often used for *zero-shot* retrieval: the metric is learned
on some classes and used to search images of classes it never saw. Here
:class:`~skdml.linear.ECAML` learns on the digits 0-4; queries and database are
the digits 5-9. :func:`skdml.plotting.plot_retrieval` shows, for a few queries,
the five nearest neighbours under raw pixels and under the learned metric, side
by side (green frame: same class as the query, red: another class).
"""

# %%
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

from skdml import ECAML
from skdml.metrics import recall_at_k
from skdml.plotting import plot_retrieval

X, y = load_digits(return_X_y=True)
X = X / 16.0
seen = y < 5
X_train, y_train = X[seen], y[seen]
X_unseen, y_unseen = X[~seen], y[~seen]

ecaml = ECAML(n_components=32, random_state=0).fit(X_train, y_train)
Z_unseen = ecaml.transform(X_unseen)

for name, Z in [("raw pixels", X_unseen), ("ECAML", Z_unseen)]:
    scores = recall_at_k(Z, y_unseen, k=[1, 5])
    print(f"{name:>10}: " + ", ".join(f"Recall@{k} {v:.3f}" for k, v in scores.items()))

# %%
# The queries where raw pixels fail most
# --------------------------------------
# Pick, among the unseen digits, queries whose raw-pixel neighbours are most
# often of another class, and see what the learned metric retrieves instead.
from skdml.metrics import nearest_neighbors  # noqa: E402

raw_nn = nearest_neighbors(X_unseen, 5)
errors = (y_unseen[raw_nn] != y_unseen[:, None]).sum(axis=1)
queries = np.argsort(-errors, kind="stable")[:5]

fig = plot_retrieval(X_unseen, queries, y=y_unseen, n_neighbors=5, image_shape=(8, 8),
                     embeddings={"raw pixels": X_unseen, "ECAML (trained on 0-4)": Z_unseen})
fig.suptitle("Unseen digits 5-9: query and its 5 nearest neighbours", y=1.02)
plt.show()
