"""Issue-28 audit cases (speed_deep): see tests/_robustness_cases.py for Case, check and classify.

Default ``DeepMetricTransformer`` fits on wide vectors. The default vector setup projects
on at most 256 principal axes once, trains 30 epochs of at most 32 batches and reads
batches prepared once; before, it trained 64-sample batches on every standardised
coordinate for up to 90 epochs. ``CASES`` (run by the unit suite) is empty: on the shared
2-core machine a wall-clock budget could not tell the two apart reliably (a 1200 x 4096
fit took 14.5 CPU seconds before and about 7 now, but 20 to 70 wall seconds either way
under load). ``SLOW_CASES`` is the issue's full default fit on 10000 x 4096 (within
60 s: 16.9 s now, 353.7 s before, ``benchmarks/studies/bench_deep_vector.py --speed``), for the
audit only (the audit script adds them).
"""

from __future__ import annotations

import time

import numpy as np

from _robustness_cases import Case, Missing, Refused, Wrong, check  # noqa: F401


def _wide(n_samples, n_features, n_classes=40):
    X = np.random.RandomState(0).rand(n_samples, n_features).astype(np.float32)
    y = np.random.RandomState(1).randint(0, n_classes, n_samples)
    return X, y


def _default_fit(n_samples, n_features):
    def run():
        from skdml import DeepMetricTransformer
        X, y = _wide(n_samples, n_features)
        est = DeepMetricTransformer(random_state=0, device="cpu")
        start = time.perf_counter()
        est.fit(X, y)
        seconds = time.perf_counter() - start
        Z = est.transform(X[:50])
        check(Z.shape == (50, est.n_components) and np.all(np.isfinite(Z)),
              f"DeepMetricTransformer default fit gave a non-finite or misshapen embedding "
              f"{Z.shape}")
        return seconds
    return run


CASES = []

#: The full default fit on 10000 x 4096 float32 (40 classes): the issue's "under 60 s on 2
#: cores". Too slow for the unit suite; for the audit script only.
SLOW_CASES = [
    Case("DeepMetricTransformer default fit on 10000 x 4096", "slow", _default_fit(10000, 4096),
         budget=60.0),
]
