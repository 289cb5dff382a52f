"""Linear (Mahalanobis) metric learners.

- :class:`BaseMahalanobis` (``_base``): ``components_``, ``transform``, distances,
  metric callables, feature names; every linear learner derives from it.
- ``_preprocessing``: the working space (scale, centring, PCA reduction) and the
  initialisations.
- ``_supervised``: the core of the supervised learners (input checks, solvers on
  the shared training engine).
- :class:`SUML` (``_suml``, objective in ``_suml_objective``), :class:`ECAML`
  (``_ecaml``), :class:`JRD` (``_jrd``).
- The classic catalogue (metric-learn's learners, issue 39): the weakly-supervised
  bases (``_weakly``: :class:`BasePairsLearner`, :class:`BaseTripletsLearner`,
  :class:`BaseQuadrupletsLearner`), their shared helpers (``_classic``), and one module
  per learner: :class:`LFDA` (``_lfda``), :class:`RCA` and :class:`RCA_Supervised`
  (``_rca``), :class:`ITML` and :class:`ITML_Supervised` (``_itml``), :class:`LMNN`
  (``_lmnn``), :class:`MLKR` (``_mlkr``), :class:`LSML` and
  :class:`LSML_Supervised` (``_lsml``), :class:`MMC` and :class:`MMC_Supervised` (``_mmc``),
  :class:`SDML` and :class:`SDML_Supervised` (``_sdml``), :class:`SCML` and
  :class:`SCML_Supervised` (``_scml``).
"""

from ._base import BaseMahalanobis, MahalanobisDistance, check_n_components
from ._ecaml import ECAML
from ._jrd import JRD
from ._itml import ITML, ITML_Supervised
from ._lfda import LFDA
from ._lmnn import LMNN
from ._lsml import LSML, LSML_Supervised
from ._mlkr import MLKR
from ._mmc import MMC, MMC_Supervised
from ._rca import RCA, RCA_Supervised
from ._scml import SCML, SCML_Supervised
from ._sdml import SDML, SDML_Supervised
from ._suml import SUML
from ._weakly import BasePairsLearner, BaseQuadrupletsLearner, BaseTripletsLearner

__all__ = ["BaseMahalanobis", "BasePairsLearner", "BaseQuadrupletsLearner",
           "BaseTripletsLearner", "ECAML", "ITML", "ITML_Supervised", "JRD", "LFDA", "LMNN",
           "LSML", "LSML_Supervised", "MLKR", "MMC", "MMC_Supervised", "MahalanobisDistance",
           "RCA", "RCA_Supervised", "SCML", "SCML_Supervised", "SDML", "SDML_Supervised",
           "SUML", "check_n_components"]
