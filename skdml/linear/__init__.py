"""Linear (Mahalanobis) metric learners.

- :class:`BaseMahalanobis` (``_base``): ``components_``, ``transform``, distances,
  metric callables, feature names; every linear learner derives from it.
- ``_preprocessing``: the working space (scale, centring, PCA reduction) and the
  initialisations.
- ``_supervised``: the core of the supervised learners (input checks, solvers on
  the shared training engine).
- :class:`SUML` (``_suml``, objective in ``_suml_objective``), :class:`ECAML`
  (``_ecaml``), :class:`JRD` (``_jrd``).
"""

from ._base import BaseMahalanobis, MahalanobisDistance, check_n_components
from ._ecaml import ECAML
from ._jrd import JRD
from ._suml import SUML

__all__ = ["BaseMahalanobis", "ECAML", "JRD", "MahalanobisDistance", "SUML",
           "check_n_components"]
