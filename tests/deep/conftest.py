"""Fixtures shared by the deep learner's tests (one test file per module of skdml/deep)."""

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread(monkeypatch):
    """Tiny nets on a shared 2-core machine: one intra-op thread was measured ~10x faster
    under load (OMP spin-waiting); ``torch_threads`` honours ``OMP_NUM_THREADS``."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def blobs():
    """Six classes of twelve 10-d vectors around separated centres."""
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(6), 12)
    centers = rng.randn(6, 10) * 3
    X = centers[y] + rng.randn(len(y), 10)
    return X, y
