"""Torch losses and regularisers for metric learning.

Every loss and regulariser is a :class:`MetricLoss` (a :class:`torch.nn.Module`)
whose ``forward(embeddings, labels)`` returns a scalar tensor (the JRS
regulariser takes a list of per-layer representations instead of one tensor).
They share one base: the batch is checked once, a loss declares whether it
works on unit-norm embeddings (``normalize_embeddings``), it returns its
per-tuple losses, and one reduction vocabulary (``"mean"``, ``"sum"``,
``"mean_nonzero"``) turns them into a scalar. Labels may have any integer
dtype; dtype and device follow the embeddings. Wherever skdml takes a loss as
a parameter, any callable with that signature (for instance a
pytorch-metric-learning loss) is accepted too.

Class                          Formula                                Paper
:class:`TripletLoss`           squared L2 on the sphere, margin 0.1   ECAML Eq. 8
:class:`NPairLoss`             multi-class N-pair, raw dot product    ECAML Eq. 9
:class:`BinomialDevianceLoss`  cosine, scale 2, margin 0.5, eta 25    ECAML Eq. 10, DeML Eq. 5
:class:`AMSoftmaxLoss`         additive margin softmax, s=20, m=0.1   JRD Eq. 11
:class:`DecoupledLoss`         a loss per learner part, averaged      DeML Eq. 5
:class:`LMNNLoss`              target-neighbour pull + impostor push  LMNN (JMLR 2009)
:class:`MultiSimilarityLoss`   mined pairs, alpha 2, beta 50, l 0.5   Wang et al. 2019
:class:`EnergyConfusion`       mean_{I!=J} log(1 + E||x_I - x_J||^2)  ECAML Eq. 3, 11
:class:`JRSRegularizer`        mean_{y_i!=y_j} prod_l k_l(x_i, x_j)   JRD Eq. 8-11
:class:`DistancePreservation`  huber(d(z)/mean - d(x)/mean), no y     RKD-D (Park et al. 2019)
"""

from ._base import REDUCTIONS, MetricLoss
from ._objective import MetricObjective
from ._registry import LOSSES, REGULARIZERS, build_loss, get_loss, get_regularizer
from .amsoftmax import AMSoftmaxLoss
from .binomial import BinomialDevianceLoss, deml_pair_weights
from .decoupled import DecoupledLoss
from .distance_preservation import DistancePreservation, relative_distances
from .energy_confusion import EnergyConfusion, class_pair_energies
from .jrs import JRSRegularizer
from .lmnn import LMNNLoss
from .multisimilarity import MultiSimilarityLoss, multi_similarity_pairs
from .npair import NPairLoss
from .triplet import TripletLoss

__all__ = [
    "AMSoftmaxLoss",
    "BinomialDevianceLoss",
    "DecoupledLoss",
    "DistancePreservation",
    "EnergyConfusion",
    "JRSRegularizer",
    "LMNNLoss",
    "LOSSES",
    "MetricLoss",
    "MetricObjective",
    "MultiSimilarityLoss",
    "NPairLoss",
    "REDUCTIONS",
    "REGULARIZERS",
    "TripletLoss",
    "build_loss",
    "class_pair_energies",
    "deml_pair_weights",
    "get_loss",
    "get_regularizer",
    "multi_similarity_pairs",
    "relative_distances",
]
