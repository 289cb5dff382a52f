"""skdml: scikit-learn compatible distance metric learning.

Linear (Mahalanobis) learners (:mod:`skdml.linear`): :class:`SUML`
(unsupervised), :class:`ECAML` and :class:`JRD` (supervised), and metric-learn's
classic learners (:class:`LFDA`, :class:`RCA`, :class:`ITML`, ..., with pair learners
and :class:`Constraints` to build pairs from labels); deep learner
(:mod:`skdml.deep`): :class:`DeepMetricTransformer`. Scorers live in
:mod:`skdml.metrics`, splitters in :mod:`skdml.model_selection`, data loaders in
:mod:`skdml.datasets`, torch losses in :mod:`skdml.losses`, a searchable gallery of
embeddings in :mod:`skdml.retrieval` and pictures in :mod:`skdml.plotting`;
:func:`show_versions` prints what a bug report needs. Every learner trains on the same
machinery (``skdml._training``).
"""

import importlib

# first, before anything imports torch: libgomp reads its wait policy when torch loads it
from . import _openmp  # noqa: F401

__version__ = "0.1.0"

# Estimators are imported lazily so that ``import skdml`` stays fast.
_LAZY = {
    "SUML": "skdml.linear",
    "ECAML": "skdml.linear",
    "JRD": "skdml.linear",
    "LFDA": "skdml.linear",
    "LMNN": "skdml.linear",
    "LSML": "skdml.linear",
    "LSML_Supervised": "skdml.linear",
    "MLKR": "skdml.linear",
    "MMC": "skdml.linear",
    "MMC_Supervised": "skdml.linear",
    "RCA": "skdml.linear",
    "RCA_Supervised": "skdml.linear",
    "SCML": "skdml.linear",
    "SCML_Supervised": "skdml.linear",
    "SDML": "skdml.linear",
    "SDML_Supervised": "skdml.linear",
    "ITML": "skdml.linear",
    "ITML_Supervised": "skdml.linear",
    "Constraints": "skdml.constraints",
    "DeepMetricTransformer": "skdml.deep",
    "show_versions": "skdml._show_versions",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'skdml' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
