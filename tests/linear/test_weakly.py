"""The weakly-supervised API (skdml/linear/_weakly.py): tuple input, the preprocessor, the pair
classifier (threshold calibration against brute force), triplet and quadruplet learners.

scikit-learn's common checks build 2-D X of samples, which a tuple learner does not fit on
(tests/test_estimators.py marks them with the reason); the behaviours they guard are checked
here on tuples: input validation, NaN/inf, empty input, pickling, clone and refit,
n_features_in_, transactional fits and GridSearchCV.
"""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV

from skdml.constraints import Constraints
from skdml.linear import (
    ITML,
    BasePairsLearner,
    BaseQuadrupletsLearner,
    BaseTripletsLearner,
)
from skdml.linear._weakly import calibrated_threshold

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


class _Diagonal(BasePairsLearner):
    """A pair learner whose metric is a fixed diagonal (a test double of a real learner)."""

    def __init__(self, weights=(1.0, 1.0), preprocessor=None, fail=False):
        self.weights = weights
        self.preprocessor = preprocessor
        self.fail = fail

    def _fit_tuples(self, pairs, y):
        if self.fail:
            raise RuntimeError("interrupted")
        self.components_ = np.diag(np.asarray(self.weights, dtype=float))


class _Triplets(BaseTripletsLearner):
    def __init__(self, preprocessor=None):
        self.preprocessor = preprocessor

    def _fit_tuples(self, triplets, y):
        self.components_ = np.eye(triplets.shape[2])


class _Quadruplets(BaseQuadrupletsLearner):
    def __init__(self, preprocessor=None):
        self.preprocessor = preprocessor

    def _fit_tuples(self, quadruplets, y):
        self.components_ = np.eye(quadruplets.shape[2])


def _pair_data(seed=0, n=40):
    rng = np.random.RandomState(seed)
    y = np.repeat(np.arange(4), n // 4)
    X = np.c_[2.0 * y + 0.3 * rng.randn(n), 3.0 * rng.randn(n)]
    idx, labels = Constraints(y).labeled_pairs(30, random_state=seed)
    return X, idx, labels


def test_pairs_as_features_or_as_indices_give_the_same_model():
    X, idx, y = _pair_data()
    a = _Diagonal().fit(X[idx], y)
    b = _Diagonal(preprocessor=X).fit(idx, y)
    assert a.threshold_ == b.threshold_
    np.testing.assert_allclose(a.pair_distance(X[idx]), b.pair_distance(idx))
    np.testing.assert_array_equal(a.predict(X[idx]), b.predict(idx))
    assert a.n_features_in_ == b.n_features_in_ == 2
    assert b.transform(X).shape == (len(X), 2)  # transform takes samples, not indices


@pytest.mark.parametrize("bad, match", [
    (np.zeros((5, 2)), "shape \\(n_pairs, 2, n_features\\)"),
    (np.zeros((5, 3, 2)), "shape \\(n_pairs, 2, n_features\\)"),
    (np.zeros((0, 2, 2)), "minimum of 1"),
    (np.full((3, 2, 2), np.nan), "NaN"),
    (np.full((3, 2, 2), np.inf), "infinity"),
])
def test_bad_pairs_raise_clear_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        _Diagonal().fit(bad, np.ones(len(bad)))


@pytest.mark.parametrize("y, match", [
    (np.array([1, 0, 1]), "\\+1 \\(similar\\) or -1"),
    (np.array([1, -1]), "one label per pair"),
    (np.array(["a", "b", "a"]), "\\+1 \\(similar\\) or -1"),
])
def test_bad_pair_labels_raise(y, match):
    with pytest.raises(ValueError, match=match):
        _Diagonal().fit(np.zeros((3, 2, 2)), y)


def test_bad_indices_into_the_preprocessor_raise():
    X = np.zeros((4, 2))
    with pytest.raises(ValueError, match="must lie in \\[0, 4\\)"):
        _Diagonal(preprocessor=X).fit(np.array([[0, 4]]), [1])
    with pytest.raises(ValueError, match="must be integers"):
        _Diagonal(preprocessor=X).fit(np.array([[0.5, 1.0]]), [1])
    with pytest.raises(ValueError, match="shape \\(n_pairs, 2\\)"):
        _Diagonal(preprocessor=X).fit(np.zeros((2, 3), dtype=int), [1, 1])
    with pytest.raises(ValueError, match="NaN"):
        _Diagonal(preprocessor=np.full((4, 2), np.nan)).fit(np.array([[0, 1]]), [1])


def test_prediction_checks_features_and_fit():
    X, idx, y = _pair_data()
    with pytest.raises(NotFittedError):
        _Diagonal().predict(X[idx])
    est = _Diagonal().fit(X[idx], y)
    with pytest.raises(ValueError, match="3 features, but _Diagonal was fitted with 2"):
        est.predict(np.zeros((2, 2, 3)))
    assert est.pair_distance(X[idx]).shape == (len(idx),)


def test_an_interrupted_fit_leaves_the_learner_unfitted():
    X, idx, y = _pair_data()
    est = _Diagonal(fail=True)
    with pytest.raises(RuntimeError):
        est.fit(X[idx], y)
    with pytest.raises(NotFittedError):
        est.predict(X[idx])


def test_predict_decision_function_and_score_agree():
    X, idx, y = _pair_data()
    est = _Diagonal(preprocessor=X).fit(idx, y)
    scores = est.decision_function(idx)
    np.testing.assert_allclose(scores, est.threshold_ - est.pair_distance(idx))
    np.testing.assert_array_equal(est.predict(idx), np.where(scores >= 0, 1, -1))
    assert est.score(idx, y) == np.mean(est.predict(idx) == y)
    np.testing.assert_array_equal(est.classes_, [-1, 1])
    est.set_threshold(-1.0)  # no distance is negative: everything dissimilar
    assert np.all(est.predict(idx) == -1)
    with pytest.raises(ValueError, match="finite real"):
        est.set_threshold(np.nan)
    with pytest.raises(ValueError, match="finite real"):
        est.set_threshold("1")


def _brute_force(d, y, strategy, min_rate=None, beta=1.0):
    """Best threshold among all candidate cut points, by an explicit loop."""
    best, best_key = None, None
    n_pos, n_neg = np.sum(y == 1), np.sum(y == -1)
    for t in np.r_[d.min() - 1.0, np.unique(d)]:
        pred = d <= t
        tp, fp = np.sum(pred & (y == 1)), np.sum(pred & (y == -1))
        tn = n_neg - fp
        tpr, tnr = tp / n_pos, tn / n_neg
        if strategy == "accuracy":
            key = (tp + tn,)
        elif strategy == "f_beta":
            p = tp / pred.sum() if pred.sum() else 0.0
            f = (1 + beta ** 2) * p * tpr / (beta ** 2 * p + tpr) if p + tpr > 0 else 0.0
            key = (f,)
        elif strategy == "max_tpr":
            key = (tpr, tnr) if tnr >= min_rate else None
        else:
            key = (tnr, tpr) if tpr >= min_rate else None
        if key is not None and (best_key is None or key > best_key):
            best, best_key = t, key
    return best


@pytest.mark.parametrize("strategy, min_rate, beta", [
    ("accuracy", None, 1.0), ("f_beta", None, 1.0), ("f_beta", None, 0.3),
    ("max_tpr", 0.8, 1.0), ("max_tnr", 0.6, 1.0), ("max_tpr", 0.0, 1.0), ("max_tnr", 1.0, 1.0)])
@pytest.mark.parametrize("seed", range(4))
def test_calibrated_threshold_matches_brute_force(strategy, min_rate, beta, seed):
    rng = np.random.RandomState(seed)
    y = np.where(rng.rand(40) < 0.4, 1, -1)
    d = np.round(np.abs(rng.randn(40) + (y == -1)), 1)  # rounded: ties
    got = calibrated_threshold(d, y, strategy, min_rate, beta)
    # the same pairs accepted as the brute force's threshold (a calibration distance) accepts
    np.testing.assert_array_equal(d <= got, d <= _brute_force(d, y, strategy, min_rate, beta))
    assert got not in d  # halfway to the next distance, never on one


def test_a_pair_gets_the_same_prediction_in_any_batch():
    # BLAS blocks a product by its size, so a pair's distance can differ by an ulp between a
    # batch and the pair alone: with the threshold on a training distance (as before), the pair
    # that set it flipped between them (9 of 1,500 predictions on random maps)
    rng = np.random.RandomState(0)
    pairs, y = rng.randn(60, 2, 20), rng.choice([-1, 1], 60)
    est = ITML(random_state=0).fit(pairs, y)
    alone = np.array([est.predict(pairs[i:i + 1])[0] for i in range(len(pairs))])
    np.testing.assert_array_equal(est.predict(pairs), alone)
    assert est.threshold_ not in est.pair_distance(pairs)


def test_max_tnr_without_positive_pairs_is_the_mirror_of_max_tpr_without_negatives():
    d = np.array([0.2, 0.5, 0.9, 1.4])
    assert calibrated_threshold(d, -np.ones(4, int), "max_tnr", min_rate=0.5) < 0.2  # none
    assert calibrated_threshold(d, np.ones(4, int), "max_tpr", min_rate=0.5) > 1.4  # all


def test_calibrate_threshold_on_the_learner_and_its_errors():
    X, idx, y = _pair_data()
    est = _Diagonal(preprocessor=X).fit(idx, y)
    est.calibrate_threshold(idx, y, strategy="max_tpr", min_rate=1.0)
    assert np.all(est.predict(idx)[y == -1] == -1)  # a true-negative rate of 1 kept
    with pytest.raises(ValueError, match="min_rate"):
        est.calibrate_threshold(idx, y, strategy="max_tnr")
    with pytest.raises(ValueError, match="strategy must be one of"):
        est.calibrate_threshold(idx, y, strategy="roc")
    with pytest.raises(ValueError, match="beta must be a positive"):
        est.calibrate_threshold(idx, y, strategy="f_beta", beta=0)
    with pytest.raises(ValueError, match="needs positive pairs"):
        est.calibrate_threshold(idx[y == -1], y[y == -1], strategy="f_beta")
    fitted = _Diagonal(preprocessor=X).fit(idx, y, calibration_params={
        "strategy": "max_tnr", "min_rate": 0.9})
    assert np.mean(fitted.predict(idx)[y == 1] == 1) >= 0.9
    with pytest.raises(ValueError, match="calibration_params takes"):
        _Diagonal().fit(X[idx], y, calibration_params={"threshold": 1})


def test_pickle_clone_and_refit_on_pairs():
    X, idx, y = _pair_data()
    est = ITML(max_iter=20, random_state=0).fit(X[idx], y)
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict(X[idx]), est.predict(X[idx]))
    refit = clone(est).fit(X[idx], y)
    np.testing.assert_allclose(refit.components_, est.components_)
    assert est.fit(X[idx], y).threshold_ == refit.threshold_  # refit is idempotent
    est32 = clone(est).fit(X[idx].astype(np.float32), y)
    np.testing.assert_allclose(est32.components_, est.components_, rtol=1e-5, atol=1e-6)


def test_a_callable_preprocessor_maps_identifiers_to_features():
    """metric-learn's callable preprocessor: any identifiers (here file-like names) mapped
    to features; the same model as with the features or an array preprocessor."""
    X, idx, y = _pair_data()
    names = np.array([f"img_{i}.png" for i in range(len(X))])
    lookup = {name: row for name, row in zip(names, X)}
    calls = []

    def load(ids):
        calls.append(ids.shape)
        return np.array([lookup[i] for i in ids])

    a = _Diagonal(weights=(2.0, 0.5), preprocessor=X).fit(idx, y)
    b = _Diagonal(weights=(2.0, 0.5), preprocessor=load).fit(names[idx], y)
    assert calls == [(idx.size,)]  # one call, on the 1-D array of every identifier
    assert a.threshold_ == b.threshold_ and b.preprocessor_ is load
    np.testing.assert_allclose(b.pair_distance(names[idx]), a.pair_distance(idx))
    np.testing.assert_array_equal(b.predict(names[idx]), a.predict(idx))
    itml = ITML(preprocessor=lambda i: X[i], max_iter=30, random_state=0).fit(idx, y)
    ref = ITML(preprocessor=X, max_iter=30, random_state=0).fit(idx, y)
    np.testing.assert_allclose(itml.components_, ref.components_)
    est = _Triplets(preprocessor=lambda i: X[i]).fit(np.array([[0, 1, 2], [3, 4, 5]]))
    assert est.n_features_in_ == 2
    clone(b).fit(names[idx], y)  # cloned with its callable


@pytest.mark.parametrize("output, match", [
    (lambda ids: np.zeros((len(ids) - 1, 2)), "returned 1 rows for 2 identifiers"),
    (lambda ids: np.full((len(ids), 2), np.nan), "finite 2-D array.*NaN"),
    (lambda ids: np.zeros(len(ids)), "finite 2-D array.*2D array"),
])
def test_a_bad_callable_preprocessor_raises(output, match):
    with pytest.raises(ValueError, match=match):
        _Diagonal(preprocessor=output).fit(np.array([[0, 1]]), [1])
    with pytest.raises(ValueError, match="shape \\(n_pairs, 2\\)"):
        _Diagonal(preprocessor=lambda ids: np.zeros((len(ids), 2))).fit(np.zeros((1, 3)), [1])
    with pytest.raises(ValueError, match="at least 1 of the pairs"):
        _Diagonal(preprocessor=lambda ids: np.zeros((len(ids), 2))).fit(
            np.zeros((0, 2), dtype=int), [])


def test_grid_search_on_pairs_with_a_preprocessor():
    X, idx, y = _pair_data(n=60)
    search = GridSearchCV(ITML(preprocessor=X, max_iter=30, random_state=0),
                          {"gamma": [0.1, 10.0]}, cv=3, scoring="roc_auc").fit(idx, y)
    assert search.best_score_ > 0.9
    assert search.predict(idx).shape == (len(idx),)


def test_triplets_and_quadruplets_learners():
    X = np.array([[0.0], [1.0], [3.0], [10.0]])
    triplets = np.array([[0, 1, 2], [0, 2, 1], [1, 2, 3]])
    est = _Triplets(preprocessor=X).fit(triplets)
    np.testing.assert_array_equal(est.predict(triplets), [1, -1, 1])
    np.testing.assert_allclose(est.decision_function(triplets), [2.0, -2.0, 7.0])
    assert est.score(triplets) == pytest.approx(2 / 3)
    np.testing.assert_allclose(_Triplets().fit(X[triplets]).decision_function(X[triplets]),
                               est.decision_function(triplets))
    quads = np.array([[0, 1, 0, 3], [0, 3, 1, 2]])
    est = _Quadruplets(preprocessor=X).fit(quads)
    np.testing.assert_array_equal(est.predict(quads), [1, -1])
    assert est.score(quads) == 0.5
    assert est.pair_distance(np.array([[0, 3]]))[0] == 10.0  # pairs through the preprocessor
    with pytest.raises(ValueError, match="shape \\(n_quadruplets, 4\\)"):
        est.predict(triplets)
    with pytest.raises(ValueError, match="shape \\(n_triplets, 3, n_features\\)"):
        _Triplets().fit(np.zeros((2, 4, 1)))


def test_score_refuses_labels_outside_plus_minus_one_as_fit_does():
    X, idx, y = _pair_data()
    est = _Diagonal(preprocessor=X).fit(idx, y)
    with pytest.raises(ValueError, match="Pair labels must be"):  # 0/1 labels: was 0.5
        est.score(idx, (y > 0).astype(int))
    assert est.score(idx, y) == np.mean(est.predict(idx) == y)


def test_accept_none_threshold_stays_below_huge_distances():
    # at 1e17 "the smallest distance minus 1" rounds back to it and accepted that pair
    pairs = np.array([[[0.0], [1e17]], [[0.0], [2e17]], [[0.0], [3e17]]])
    y = np.array([-1, -1, -1])
    est = _Diagonal(weights=(1.0,)).fit(pairs, np.array([1, -1, -1]))
    est.calibrate_threshold(pairs, y)
    np.testing.assert_array_equal(est.predict(pairs), y)
    assert calibrated_threshold(np.array([1e17, 2e17]), np.array([-1, -1])) < 1e17
    assert calibrated_threshold(np.array([0.5, 2.0]), np.array([-1, -1])) == -0.5  # minus 1


def test_pair_labels_in_an_object_array_and_indices_far_out_of_range():
    X, idx, y = _pair_data()
    by_object = _Diagonal(preprocessor=X).fit(idx, y.astype(object))
    np.testing.assert_array_equal(by_object.components_, _Diagonal(preprocessor=X).fit(
        idx, y).components_)
    with pytest.raises(ValueError, match="got values"):
        _Diagonal(preprocessor=X).fit(idx, np.array(["1"] * len(y), dtype=object))
    far = idx.astype(np.float64)
    far[0, 1] = 1e20  # was cast to int64 first: "indices from -9223372036854775808"
    with pytest.raises(ValueError, match="got indices from 0 to 1e"):
        _Diagonal(preprocessor=X).fit(far, y)


def test_a_dataframe_preprocessor_names_the_features():
    pd = pytest.importorskip("pandas")
    X, idx, y = _pair_data()
    frame = pd.DataFrame(X, columns=["height", "width"])
    est = _Diagonal(preprocessor=frame).fit(idx, y)
    np.testing.assert_array_equal(est.feature_names_in_, ["height", "width"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "fitted without feature names"
        est.transform(frame)
    est.set_params(preprocessor=None).fit(X[idx], y)
    assert not hasattr(est, "feature_names_in_")  # a refit on arrays forgets them


@pytest.mark.parametrize("with_preprocessor", [False, True])
def test_fit_transform_is_refused_where_fit_takes_tuples(with_preprocessor):
    # scikit-learn's fit_transform is fit(X).transform(X): with a preprocessor, the rows of
    # indices were embedded as if they were samples (2 features = the pair's 2 indices)
    rng = np.random.RandomState(0)
    X, y = rng.randn(30, 2), np.repeat([0, 1, 2], 10)
    idx, labels = Constraints(y).labeled_pairs(20, random_state=0)
    learner = ITML(max_iter=5, preprocessor=X if with_preprocessor else None)
    pairs = idx if with_preprocessor else X[idx]
    with pytest.raises(TypeError, match=r"fit takes pairs .* transform takes samples"):
        learner.fit_transform(pairs, labels)
    assert learner.fit(pairs, labels).transform(X).shape == (30, 2)  # the route it names


def test_pair_classifiers_are_binary_in_their_tags():
    from sklearn.utils import get_tags
    assert get_tags(ITML()).classifier_tags.multi_class is False  # labels are -1 and +1 only
    assert get_tags(_Diagonal()).classifier_tags.multi_class is False


@pytest.mark.parametrize("preprocessor", ["array", "callable"])
def test_three_d_tuples_are_features_even_with_a_preprocessor(preprocessor):
    # metric-learn's rule: pairs of new samples are scored by a learner fitted on indices
    from skdml.linear import ITML

    X = np.array([[0., 0], [0.1, 0], [3, 0], [3.1, 0]])
    pairs = np.array([[0, 1], [2, 3], [0, 2], [1, 3]])
    y = np.array([1, 1, -1, -1])
    pre = X if preprocessor == "array" else (lambda ids: X[ids])
    est = ITML(preprocessor=pre).fit(pairs, y)
    new = np.array([[[0.0, 0.0], [0.05, 0.0]], [[0.0, 0.0], [3.0, 0.0]]])
    np.testing.assert_array_equal(est.predict(new), [1, -1])
    np.testing.assert_allclose(est.pair_distance(X[pairs]), est.pair_distance(pairs))


@pytest.mark.parametrize("beta", [1e150, np.float64(1e200), 1e200, np.inf, 1e-200])
def test_f_beta_calibration_with_extreme_beta_is_the_limit_rate(beta):
    # beta -> inf: F-beta -> recall (accept the similar pairs); beta -> 0: precision
    from skdml.linear._weakly import calibrated_threshold

    d = np.array([0.1, 0.2, 1.0, 1.5, 3.0])
    y = np.array([1, 1, -1, 1, -1])
    t = calibrated_threshold(d, y, strategy="f_beta", beta=beta)
    if beta > 1:
        assert 1.5 < t < 3.0  # every similar pair accepted, the first threshold to do so
    else:
        assert 0.1 < t < 1.0  # precision 1: only similar pairs accepted
    assert t == calibrated_threshold(d, y, strategy="f_beta",
                                     beta=np.inf if beta > 1 else 1e-300)


def test_calibration_params_must_be_a_dict():
    X = np.array([[0., 0], [0.1, 0], [3, 0], [3.1, 0]])
    pairs = np.array([[0, 1], [2, 3], [0, 2], [1, 3]])
    with pytest.raises(TypeError, match="calibration_params must be a dict"):
        _Diagonal(preprocessor=X).fit(pairs, [1, 1, -1, -1], calibration_params="f_beta")


def test_decision_function_follows_scikit_learns_binary_convention():
    # it was minus the distance (always <= 0): scikit-learn's threshold tools read its sign,
    # and FixedThresholdClassifier called every pair dissimilar (accuracy 1.0 -> 0.5)
    from sklearn.model_selection import FixedThresholdClassifier
    from sklearn.metrics import roc_auc_score

    X, idx, y = _pair_data()
    est = _Diagonal(preprocessor=X).fit(idx, y)
    scores = est.decision_function(idx)
    np.testing.assert_array_equal(scores > 0, est.predict(idx) == 1)
    assert (scores > 0).any() and (scores < 0).any()
    wrapped = FixedThresholdClassifier(est, response_method="decision_function").fit(idx, y)
    np.testing.assert_array_equal(wrapped.predict(idx), est.predict(idx))
    assert roc_auc_score(y, scores) == roc_auc_score(y, est.pair_score(idx))


class _FirstFeature(BasePairsLearner):
    """A pair learner whose metric is the first feature."""

    def __init__(self, preprocessor=None):
        self.preprocessor = preprocessor

    def _fit_tuples(self, pairs, y):
        self.components_ = np.eye(pairs.shape[2])[:1]


def test_index_pairs_in_a_nullable_integer_frame_are_accepted():
    pd = pytest.importorskip("pandas")
    X = np.array([[0.0, 5.0], [0.1, -5.0], [3.0, 0.0]])
    pairs, y = np.array([[0, 1], [0, 2]]), np.array([1, -1])
    est = _FirstFeature(preprocessor=X).fit(pd.DataFrame(pairs, dtype="Int64"), y)
    np.testing.assert_array_equal(est.predict(pd.DataFrame(pairs, dtype="Int64")),
                                  est.predict(pairs))
    with pytest.raises(ValueError, match="must be integers.*some are missing"):
        _FirstFeature(preprocessor=X).fit(pd.DataFrame([[0, 1], [0, None]], dtype="Int64"), y)


def test_the_accept_all_threshold_lies_above_the_largest_distance_at_any_scale():
    # from about 2**53 the halfway point to the float above rounded back onto the largest
    # distance: the threshold sat on a calibration distance
    X = np.array([[0.0], [1e17], [3e17], [0.0]])
    est = _FirstFeature(preprocessor=X).fit(np.array([[0, 1], [0, 2], [3, 0]]), [1, 1, 1])
    assert est.threshold_ > est.pair_distance(np.array([[0, 2]]))[0]


def test_tuples_with_fewer_features_than_fitted_are_refused_clearly():
    # fewer features than at fit get the "fitted with" message too (a matmul error before)
    est = _Diagonal(weights=(1.0, 1.0, 1.0)).fit(np.random.RandomState(0).randn(4, 2, 3),
                                                  [1, -1, 1, -1])
    with pytest.raises(ValueError, match="2 features, but _Diagonal was fitted with 3"):
        est.predict(np.zeros((2, 2, 2)))


def test_max_tnr_and_max_tpr_break_ties_by_the_other_rate():
    # every threshold below 0.4 has a TNR of 1; of them, accepting the three positives (TPR
    # 1) is the best; mirrored for max_tpr
    t = calibrated_threshold(np.array([0.1, 0.2, 0.3, 0.4]), np.array([1, 1, 1, -1]),
                             "max_tnr", min_rate=0.3)
    assert 0.3 < t < 0.4
    t = calibrated_threshold(np.array([0.1, 0.2, 0.3, 0.4]), np.array([1, -1, -1, -1]),
                             "max_tpr", min_rate=0.0)
    assert 0.1 < t < 0.2


def test_negative_indices_into_the_preprocessor_are_refused():
    # -1 would wrap around to the last row: a wrong pair, silently
    X = np.zeros((4, 2))
    with pytest.raises(ValueError, match=r"must lie in \[0, 4\)"):
        _FirstFeature(preprocessor=X).fit(np.array([[-1, 0], [1, 2]]), [1, -1])
    est = _FirstFeature(preprocessor=X).fit(np.array([[0, 1], [1, 2]]), [1, -1])
    with pytest.raises(ValueError, match=r"must lie in \[0, 4\)"):
        est.predict(np.array([[0, -2]]))


def test_a_pair_exactly_at_the_threshold_is_similar():
    # "at most this far apart" (set_threshold)
    X = np.array([[0.0, 5.0], [0.5, -5.0], [3.0, 0.0]])
    pairs, y = np.array([[0, 1], [0, 2]]), np.array([1, -1])
    est = _FirstFeature(preprocessor=X).fit(pairs, y)
    est.set_threshold(0.5)  # exactly the first pair's distance
    assert est.pair_distance(pairs)[0] == 0.5
    np.testing.assert_array_equal(est.predict(pairs), [1, -1])


def test_a_preprocessor_returning_too_many_rows_is_refused_clearly():
    with pytest.raises(ValueError, match="returned 3 rows for 2 identifiers"):
        _FirstFeature(preprocessor=lambda ids: np.zeros((len(ids) + 1, 2))).fit(
            np.array([[0, 1]]), [1])


def test_a_tied_triplet_or_quadruplet_is_not_satisfied():
    # +1 only where the first pair is closer than the second
    triplets = np.array([[[0.0], [1.0], [-1.0]]])  # d(a, p) == d(a, n) == 1
    est = _Triplets().fit(triplets)
    assert est.decision_function(triplets)[0] == 0.0
    np.testing.assert_array_equal(est.predict(triplets), [-1])
    assert est.score(triplets) == 0.0
    quadruplets = np.array([[[0.0], [2.0], [5.0], [7.0]]])  # both pairs 2 apart
    np.testing.assert_array_equal(_Quadruplets().fit(quadruplets).predict(quadruplets), [-1])
