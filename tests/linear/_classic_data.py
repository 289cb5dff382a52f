"""Small problems where the metric matters, shared by the tests of the classic learners."""

import numpy as np
from sklearn.model_selection import cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline


def noisy_classes(n=120, n_classes=3, n_noise=6, noise=4.0, seed=0, modes=1):
    """Classes separated in 2 features, drowned by ``n_noise`` large noisy features.

    With ``modes=2`` each class is two clusters far apart (LFDA's multimodal case).
    """
    rng = np.random.RandomState(seed)
    y = np.arange(n) % n_classes
    centres = 2.0 * np.c_[np.cos(2 * np.pi * y / n_classes), np.sin(2 * np.pi * y / n_classes)]
    if modes == 2:
        centres = centres + 8.0 * ((np.arange(n) // n_classes) % 2)[:, None]
    X = np.hstack([centres + 0.4 * rng.randn(n, 2), noise * rng.randn(n, n_noise)])
    return X, y


def knn_score(estimator, X, y, k=1):
    """Cross-validated k-NN accuracy in the learned space (the raw space for ``None``)."""
    steps = [estimator] if estimator is not None else []
    return cross_val_score(make_pipeline(*steps, KNeighborsClassifier(k)), X, y, cv=3).mean()
