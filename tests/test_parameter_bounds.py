"""Public parameters at their bounds: booleans are not ints, sizes are bounded before use.

Each case was accepted before and then failed inside torch, allocated without bound,
overflowed a C integer, or was read as another value (the eighth audit).
"""

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from skdml.linear import LMNN, SCML_Supervised, SDML_Supervised
from skdml.metrics import (few_shot_accuracy, nearest_neighbors, nmi_score, recall_at_k,
                           sharded_retrieval_scores)
from skdml.retrieval import RetrievalIndex

rng = np.random.RandomState(0)
X = rng.randn(40, 4)
y = np.repeat(np.arange(4), 10)

BOOLEAN_AS_INT = {
    "recall_at_k(batch_size)": lambda: recall_at_k(X, y, k=1, batch_size=True),
    "nearest_neighbors(batch_size)": lambda: nearest_neighbors(X, 2, batch_size=True),
    "nmi_score(n_init)": lambda: nmi_score(X, y, n_init=True),
    "few_shot_accuracy(n_shot)": lambda: few_shot_accuracy(X, y, n_way=2, n_shot=True, n_queries=2),
    "sharded_retrieval_scores(n_shards)": lambda: sharded_retrieval_scores(X, y, n_shards=True),
    "RetrievalIndex(batch_size)": lambda: RetrievalIndex(batch_size=True).fit(X, y).query(X, 2),
}


@pytest.mark.parametrize("case", sorted(BOOLEAN_AS_INT))
def test_a_boolean_is_not_taken_for_an_int(case):
    with pytest.raises((InvalidParameterError, ValueError), match="batch_size|n_init|n_shot|"
                       "n_shards"):
        BOOLEAN_AS_INT[case]()


def test_lmnn_sizes_its_target_table_by_the_classes():
    # n_neighbors=1000 on classes of 10 stored (40, 1000) of which 39,640 were -1 padding;
    # n_neighbors=10**12 asked for 291 TiB
    est = LMNN(n_neighbors=10**12, max_iter=2).fit(X, y)
    assert est.target_neighbors_.shape == (40, 9)
    np.testing.assert_array_equal(est.target_neighbors_,
                                  LMNN(n_neighbors=9, max_iter=2).fit(X, y).target_neighbors_)


def test_sdml_max_iter_beyond_the_graphical_lasso_is_a_parameter_error():
    with pytest.raises(InvalidParameterError, match="max_iter"):  # OverflowError before
        SDML_Supervised(max_iter=2**32).fit(X, y)


def test_scml_refuses_more_draws_than_it_can_hold():
    with pytest.raises(ValueError, match="max_iter x batch_size"):  # MemoryError before
        SCML_Supervised(max_iter=10**12, random_state=0).fit(X, y)
