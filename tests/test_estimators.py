"""scikit-learn's common checks on every public skdml estimator, found automatically.

:func:`public_estimators` walks the public modules of the package, so an
estimator added anywhere in skdml is checked here without anyone listing it;
it only needs fast settings in :data:`FAST` (the test below fails, naming it,
when they are missing).
"""

import importlib
import inspect
import pkgutil
import warnings

import pytest
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

import skdml

#: Per-sample results of a float32 network differ by ~1 ulp with the batch composition.
_ORDER_REASON = ("float32 network: embedding one sample inside batches of different "
                 "composition differs by ~1 float32 ulp (BLAS blocking), above the check's "
                 "rtol=1e-7; the maths is per-sample and order-independent")


def public_estimators():
    """Every estimator class defined in a public module of skdml (no ``_`` in its path)."""
    found = {}
    modules = [skdml] + [importlib.import_module(info.name) for info in pkgutil.walk_packages(
        skdml.__path__, prefix="skdml.") if not any(
            part.startswith("_") for part in info.name.split("."))]
    for module in modules:
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, BaseEstimator) \
                    and not inspect.isabstract(obj) and not name.startswith("Base"):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[key] for key in sorted(found)]


#: Fast settings per estimator, each a list of variants (the solvers, manifolds, forms).
FAST = {
    "SUML": [dict(n_components=2, n_triplets=200, max_iter=5, random_state=0),
             dict(n_components=2, batch_size=10, probability="softmax", manifold="stiefel",
                  dtype="float64", n_triplets=200, max_iter=5, random_state=0)],
    "ECAML": [dict(max_iter=3, random_state=0),
              dict(max_iter=3, solver="conjugate_gradient", loss="triplet", random_state=0)],
    "JRD": [dict(max_iter=3, random_state=0),
            dict(max_iter=3, solver="conjugate_gradient", manifold="stiefel", random_state=0)],
    "DeepMetricTransformer": [dict(n_components=3, max_iter=1, n_samples_per_class=2,
                                   device="cpu", loader_params={"batches_per_epoch": 2,
                                                                "transform_batch_size": 7})],
    "RetrievalIndex": [dict()],
}

#: Checks expected to fail, with the reason, per estimator.
EXPECTED_FAILURES = {
    "DeepMetricTransformer": {"check_methods_sample_order_invariance": _ORDER_REASON,
                              "check_methods_subset_invariance": _ORDER_REASON},
}


def test_every_public_estimator_has_fast_settings():
    names = {cls.__name__ for cls in public_estimators()}
    assert {"SUML", "ECAML", "JRD", "DeepMetricTransformer"} <= names
    missing = names - set(FAST)
    assert not missing, f"add fast settings to FAST for {sorted(missing)}"


def _instances():
    return [cls(**params) for cls in public_estimators()
            for params in FAST.get(cls.__name__, [{}])]


@parametrize_with_checks(_instances(), expected_failed_checks=lambda est: EXPECTED_FAILURES.get(
    type(est).__name__, {}))
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        # a few iterations on random data: not converging is expected here
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.filterwarnings("ignore", message=".*L is orthogonal", category=UserWarning)
        check(estimator)
