"""Small builders shared by the deep learner's test files (imported by name: tests/deep is
on the path of its test modules)."""

import numpy as np
import torch
from sklearn.datasets import make_classification

from skdml import DeepMetricTransformer
from skdml.deep import MLP, SmallCNN


def tiny_mlp(input_shape, hidden=(16, 8), dropout=0.0):
    return MLP(int(np.prod(input_shape)), hidden=hidden, dropout=dropout)


def tiny_cnn(input_shape):
    return SmallCNN(input_shape[0], widths=(4, 8))


def make(**kw):
    """A fast learner with a tiny MLP backbone."""
    params = dict(backbone=tiny_mlp, n_components=4, max_iter=2, device="cpu",
                  random_state=0, learning_rate=1e-3)
    params.update(kw)
    return DeepMetricTransformer(**params)


def fast(**params):
    """The defaults, on the CPU, seeded."""
    return DeepMetricTransformer(device="cpu", random_state=0, **params)


def zero_shot_vectors(seed=0, n_classes=20, per_class=30, dim=40):
    """Classes differ in 5 of 40 dimensions; the other 35 are loud noise."""
    rng = np.random.RandomState(seed)
    y = np.repeat(np.arange(n_classes), per_class)
    centers = np.zeros((n_classes, dim))
    centers[:, :5] = 2 * rng.randn(n_classes, 5)
    noise = np.concatenate([0.3 * rng.randn(len(y), 5), 2 * rng.randn(len(y), dim - 5)], axis=1)
    return (centers[y] + noise).astype(np.float32), y


def zero_shot_images(seed=0, n_classes=16, per_class=24, side=16):
    """Each class is a random 5x5 glyph drawn at a random place on a noisy 16x16 ground."""
    rng = np.random.RandomState(seed)
    glyphs = (rng.rand(n_classes, 5, 5) > 0.5).astype(np.float32)
    y = np.repeat(np.arange(n_classes), per_class)
    X = 0.3 * rng.rand(len(y), 1, side, side).astype(np.float32)
    for i, c in enumerate(y):
        r, s = rng.randint(0, side - 5, size=2)
        X[i, 0, r:r + 5, s:s + 5] += glyphs[c]
    return X, y


def params_of(est):
    return {k: v.detach().clone() for k, v in est.module_.state_dict().items()}


def assert_same_params(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def without_seconds(history):
    return [{k: v for k, v in rec.items() if k != "seconds"} for rec in history]


def many_classes(seed):
    """20 classes in 40 features (12 informative, 8 redundant, 20 noise); 30 per class."""
    X, y = make_classification(n_samples=600, n_features=40, n_informative=12,
                               n_redundant=8, n_classes=20, n_clusters_per_class=1,
                               class_sep=2.0, random_state=seed)
    return X.astype(np.float32), y
