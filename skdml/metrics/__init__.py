"""Retrieval and clustering scores for learned embeddings, exact neighbours, and scorers.

Exact nearest neighbours (blockwise float32 search in torch, on the GPU when one
is present, never an ``N x N`` matrix; certified by error bounds and repaired in
float64 where float32 cannot decide):

- :func:`nearest_neighbors`: indices of the k nearest references of each query.
- :func:`knn_accuracy`: majority-vote k-NN accuracy for several k.

Retrieval scores (from the same engine):

- :func:`recall_at_k`: Recall@K of Oh Song et al. (2016), the metric of the
  ECAML paper: a query scores 1 if at least one of its K nearest *other* points
  shares its label.
- :func:`map_at_r`: MAP@R of Musgrave et al., "A Metric Learning Reality Check"
  (2020).
- :func:`r_precision`: R-precision, the same protocol's third number (with
  Precision@1, which is Recall@1 here, and MAP@R).
- :func:`retrieval_scores`: all three from one neighbour search.
- :func:`sharded_retrieval_scores`, :func:`distributed_retrieval_scores`: the
  same scores with the queries spread over joblib/Dask workers or over the ranks
  of a ``torch.distributed`` job, equal to one process bit for bit.

Few-shot classification: :func:`few_shot_accuracy`, the N-way K-shot episode
accuracy of nearest-prototype classification (Prototypical Networks), with a
95% confidence interval.

Clustering scores (k-means with as many clusters as classes):

- :func:`nmi_score`: ``NMI = 2 I(clusters; classes) / (H(clusters) + H(classes))``.
- :func:`clustering_f1_score`: pairwise F1 from the contingency table's non-zero cells, in
  ``O(n)`` memory.
- :func:`clustering_scores`: both from one k-means run.

Scorer factories for ``scoring=`` in :func:`~sklearn.model_selection.cross_val_score`
and :class:`~sklearn.model_selection.GridSearchCV`: :func:`recall_at_k_scorer`,
:func:`map_at_r_scorer`, :func:`r_precision_scorer`, :func:`nmi_scorer`,
:func:`clustering_f1_scorer`. Each is called as ``scorer(estimator, X, y)``: it
embeds ``X`` with the fitted ``estimator.transform`` and scores the embedding
within the fold.

Layout: ``_validation`` (input checks), ``_exact`` (float32 and float64 frames, error
bounds, float64 distances), ``_select`` (the smallest values of each row, sorted),
``_neighbors`` (the engine and its public functions), ``_retrieval``, ``_clustering``,
``_scorers``.

Conventions shared by the neighbour-based functions
---------------------------------------------------
- Without ``X_ref`` every sample is a query against all the *other* samples: the
  query itself is excluded by index (not by a zero distance), so exact
  duplicates of a query still count as neighbours.
- With ``X_ref``/``y_ref`` (query/gallery form, In-Shop style) the queries are
  searched in the gallery and nothing is excluded.
- Neighbours are ranked as a float64 brute force ranks them, for any finite
  input: by ``sum((x_r - x_q) ** 2)`` (Euclidean; both sets rescaled by one exact
  power of two where squares would overflow) or by ``sum((u_r - u_q) ** 2)``,
  ``u = x / ||x||`` (cosine: ``2 - 2 cos`` from rows normalised in float64, which
  keeps the digits that ``1 - cos`` loses near 1; an all-zero row has similarity 0
  to every row, another all-zero row included: see "Cosine and all-zero rows" in
  ``doc/metrics.md``), ties broken in favour of the reference with the lower index.
  The search runs in float32 after a robust centring (coordinate-wise median)
  and an exact power-of-two scaling; rigorous bounds on its rounding error tell
  which candidates it cannot order, and only those are re-ranked in float64.
  Deep lists among many references (MAP@R with large classes), where float32
  leaves many such candidates, run in a float64 frame on the CPU when a probe
  of 32 queries shows that it pays.
  Offsets (``X + 1e8``), outliers (a row at ``1e7``) and scales from ``1e-150``
  to ``1e150`` therefore give the same neighbours as ordinary data.
- A *lone* query, one with no same-label point among its references (a class
  with a single sample, or a query class absent from the gallery), can neither
  hit nor be ranked; the retrieval scores leave it out of the average, as
  pytorch-metric-learning's ``AccuracyCalculator`` does. If every query is lone
  a ``ValueError`` is raised.
- Labels are compared as labels (integers, strings...), never cast to float.
- The clustering scores are invariant to a translation and a positive rescaling
  of ``X``: it is standardised robustly in float64 before k-means.
"""

from ._clustering import clustering_f1_score, clustering_scores, nmi_score
from ._few_shot import few_shot_accuracy
from ._neighbors import knn_accuracy, nearest_neighbors
from ._retrieval import map_at_r, r_precision, recall_at_k, retrieval_scores
from ._sharded import distributed_retrieval_scores, sharded_retrieval_scores
from ._scorers import (NotATransformerError, clustering_f1_scorer, map_at_r_scorer,
                       nmi_scorer, r_precision_scorer, recall_at_k_scorer)

# The seam of skdml's own modules (skdml.retrieval): the input check of embeddings, the kind
# of a label array and the float64 distances the engine ranks by. Not public API (not in
# __all__).
from ._exact import normalise_rows as normalise_rows  # noqa: E402
from ._exact import pair_distances as pair_distances  # noqa: E402
from ._validation import as_host_array as as_host_array  # noqa: E402
from ._validation import as_host_labels as as_host_labels  # noqa: E402
from ._validation import check_embeddings as check_embeddings  # noqa: E402
from ._validation import label_kind as label_kind  # noqa: E402

__all__ = [
    "NotATransformerError",
    "nearest_neighbors",
    "knn_accuracy",
    "recall_at_k",
    "map_at_r",
    "r_precision",
    "retrieval_scores",
    "sharded_retrieval_scores",
    "distributed_retrieval_scores",
    "nmi_score",
    "clustering_f1_score",
    "clustering_scores",
    "few_shot_accuracy",
    "recall_at_k_scorer",
    "map_at_r_scorer",
    "r_precision_scorer",
    "nmi_scorer",
    "clustering_f1_scorer",
]
