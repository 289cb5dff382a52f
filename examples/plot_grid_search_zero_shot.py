"""
Model selection for unseen classes: GridSearchCV with ClassDisjointSplit
========================================================================

To choose hyper-parameters for zero-shot retrieval, each validation fold must
hold classes that the fit never saw. :class:`~skdml.model_selection.ClassDisjointSplit`
makes such folds, and :func:`~skdml.metrics.recall_at_k_scorer` scores the
embedding of a fold by Recall@1. Here :class:`~skdml.linear.ECAML` and
:class:`~skdml.linear.JRD`, both set for unseen classes
(``validation_split="class_disjoint"``), are tuned over the embedding size inside
a ``Pipeline`` after a ``StandardScaler``.
"""

# %%
import matplotlib.pyplot as plt
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from skdml import ECAML, JRD
from skdml.metrics import recall_at_k_scorer
from skdml.model_selection import ClassDisjointSplit

X, y = load_digits(return_X_y=True)
X, y = X[::2], y[::2]  # 899 digits keep the search to seconds

learners = {"ECAML": ECAML(validation_split="class_disjoint", random_state=0),
            "JRD": JRD(validation_split="class_disjoint", random_state=0)}
pipe = Pipeline([("scale", StandardScaler()), ("learner", learners["ECAML"])])
grid = [{"learner": [learner], "learner__n_components": [8, 16, 32]}
        for learner in learners.values()]
search = GridSearchCV(pipe, grid, scoring=recall_at_k_scorer(k=1),
                      cv=ClassDisjointSplit(n_splits=2, test_size=0.4, random_state=0))
search.fit(X, y)
best = search.best_estimator_[-1]
print("best:", type(best).__name__, f"n_components={best.n_components}",
      f"Recall@1 {search.best_score_:.3f}")
# Each fit holds out classes of its own training data and keeps its PCA start unless a
# learned epoch beats it there: on these pixels, the start is kept (best_iteration_ 0),
# so the search chooses the embedding size.
print("the refitted model's best_iteration_:", best.best_iteration_)

# %%
# The search results
# ------------------
# Mean Recall@1 on the held-out classes, with one standard deviation over folds.
res = search.cv_results_
fig, ax = plt.subplots(figsize=(6, 3.5))
for name in learners:
    rows = [i for i, p in enumerate(res["param_learner"]) if type(p).__name__ == name]
    sizes = [res["param_learner__n_components"][i] for i in rows]
    ax.errorbar(sizes, res["mean_test_score"][rows], yerr=res["std_test_score"][rows],
                marker="o", capsize=3, label=name)
ax.set_xscale("log", base=2)
ax.set_xlabel("n_components")
ax.set_ylabel("Recall@1 on unseen classes")
ax.set_title("GridSearchCV over ClassDisjointSplit folds (digits)")
ax.legend()
ax.grid(alpha=0.3)
fig.tight_layout()
plt.show()
