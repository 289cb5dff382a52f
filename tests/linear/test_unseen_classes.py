"""ECAML and JRD, set for unseen classes, never lose to their own PCA start on them.

The learners train on half of the classes; Recall@1 is measured among the other half
(classes never seen in training), for the learned metric and for its start
(``max_iter=0``, the leading principal axes). ``validation_split="class_disjoint"``, the
switch a user sets for retrieval of unseen classes, validates early stopping on held-out
classes and keeps the start unless learning beats it significantly on them.
"""

import os

import numpy as np
import pytest
from sklearn.datasets import load_digits

from skdml import ECAML, JRD
from skdml.metrics import recall_at_k

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "datasets")
#: One query in 900 (digits) or 200 (faces) is 0.001-0.005: allow less than one.
TOLERANCE = 0.001


def _start_and_learned(learner, X, y, train, n_components):
    test = ~train
    start = learner(n_components=n_components, max_iter=0, random_state=0).fit(X[train],
                                                                               y[train])
    learned = learner(n_components=n_components, validation_split="class_disjoint",
                      random_state=0).fit(X[train], y[train])
    return (recall_at_k(start.transform(X[test]), y[test], 1),
            recall_at_k(learned.transform(X[test]), y[test], 1))


@pytest.mark.parametrize("learner", [ECAML, JRD])
def test_never_loses_to_its_pca_start_on_unseen_digits(learner):
    X, y = load_digits(return_X_y=True)
    start, learned = _start_and_learned(learner, X, y, y % 2 == 0, 32)  # odd digits unseen
    assert learned >= start - TOLERANCE, (start, learned)


@pytest.mark.skipif(not os.path.exists(os.path.join(SHARED, "att_faces_64x64.mat")),
                    reason="AT&T faces not found in ../shared/datasets")
def test_jrd_never_loses_to_its_pca_start_on_unseen_faces():
    from skdml.datasets import load_att_faces

    X, y = load_att_faces(return_X_y=True, data_home=SHARED)
    start, learned = _start_and_learned(JRD, X, y, y < np.median(np.unique(y)), 64)
    assert learned >= start - TOLERANCE, (start, learned)
