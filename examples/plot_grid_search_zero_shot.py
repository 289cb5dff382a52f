"""
Model selection for unseen classes: GridSearchCV with ClassDisjointSplit
========================================================================

To choose hyper-parameters for zero-shot retrieval, each validation fold must
hold classes that the fit never saw. :class:`~skdml.model_selection.ClassDisjointSplit`
makes such folds, and :func:`~skdml.metrics.recall_at_k_scorer` scores the
embedding of a fold by Recall@1. Here :class:`~skdml.linear.ECAML` (with its
Energy-Confusion weight) and :class:`~skdml.linear.JRD` (with its JRS weight)
are tuned inside a ``Pipeline`` after a ``StandardScaler``.
"""

# %%
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from skdml import ECAML, JRD
from skdml.metrics import recall_at_k_scorer
from skdml.model_selection import ClassDisjointSplit

X, y = load_digits(return_X_y=True)
X, y = X[::2], y[::2]  # 899 digits keep the search to seconds
# max_iter=15 keeps the example quick; the learners warn that they were cut short.
warnings.filterwarnings("ignore", category=ConvergenceWarning)

pipe = Pipeline([("scale", StandardScaler()),
                 ("learner", ECAML(n_components=16, max_iter=15, random_state=0))])
grid = [
    {"learner": [ECAML(n_components=16, max_iter=15, random_state=0)],
     "learner__regularizer_weight": [0.0, 1.0]},
    {"learner": [JRD(n_components=16, max_iter=15, random_state=0)],
     "learner__regularizer_weight": [0.0, 1.0]},
]
search = GridSearchCV(pipe, grid, scoring=recall_at_k_scorer(k=1),
                      cv=ClassDisjointSplit(n_splits=2, test_size=0.4, random_state=0))
search.fit(X, y)
print("best:", search.best_params_, f"Recall@1 {search.best_score_:.3f}")

# %%
# The search results
# ------------------
# Mean Recall@1 on the held-out classes, with one standard deviation over folds.
res = search.cv_results_
fig, ax = plt.subplots(figsize=(6, 3.5))
for name, key in [("ECAML", "param_learner__regularizer_weight"), ("JRD", "param_learner__regularizer_weight")]:
    rows = [i for i, v in enumerate(res[key]) if v is not np.ma.masked]
    weights = np.array([res[key][i] for i in rows], dtype=float)
    ax.errorbar(weights + 1e-2, res["mean_test_score"][rows], yerr=res["std_test_score"][rows],
                marker="o", capsize=3, label=f"{name} (x = regulariser weight)")
ax.set_xscale("log")
ax.set_xlabel("regulariser weight (+0.01 so that 0 shows on a log axis)")
ax.set_ylabel("Recall@1 on unseen classes")
ax.legend()
ax.grid(alpha=0.3)
fig.tight_layout()
plt.show()
