"""Tests of skdml.JRD (the shared linear machinery is also covered in test_ecaml.py)."""

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline

from skdml import JRD

pytestmark = [pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning"),
              pytest.mark.filterwarnings("ignore:.*L is orthogonal:UserWarning")]


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """The shared 2-core test machine: multi-threaded BLAS was measured 10x slower here."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


def _data(n_samples=120, n_features=10, n_classes=4, seed=0):
    return make_classification(n_samples=n_samples, n_features=n_features, n_informative=4,
                               n_redundant=0, n_classes=n_classes, n_clusters_per_class=1,
                               class_sep=2.0, random_state=seed)


def _two_informative(n_samples=200, seed=0):
    rng = np.random.RandomState(seed)
    y = rng.randint(0, 4, n_samples)
    centers = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=float) * 3.0
    X = np.hstack([centers[y] + 0.5 * rng.randn(n_samples, 2), 4.0 * rng.randn(n_samples, 18)])
    return X, y


def losses(est):
    """Objective per epoch of the run that made ``components_`` (the refit, if any)."""
    refit = [h["loss"] for h in est.history_ if h.get("refit")]
    return np.array(refit or [h["loss"] for h in est.history_])


def _objective(est, X, y):
    """JRD's objective on the whole data, recomputed from the fitted attributes only."""
    from skdml.losses import AMSoftmaxLoss, JRSRegularizer

    E = torch.nn.functional.normalize(torch.tensor(est.transform(X) + est.bias_), dim=1)
    am = AMSoftmaxLoss(len(est.classes_), E.shape[1], scale=est.scale, margin=est.margin)
    am = am.to(torch.float64)
    with torch.no_grad():
        am.proxies.copy_(torch.tensor(est.proxies_))
    y_t = torch.tensor(np.searchsorted(est.classes_, y))
    cos = am.class_cosines(E)
    Xc = torch.tensor(X - X.mean(0))
    value = am(E, y_t, cosines=cos) + est.regularizer_weight * JRSRegularizer()([Xc, E, cos], y_t)
    return float(value.detach())


@pytest.mark.parametrize("solver", ["adam", "conjugate_gradient"])
def test_solvers_reduce_objective(solver):
    X, y = _data()
    kw = dict(n_components=3, solver=solver, init="random", neighbor_weight=0.0, random_state=0)
    start = JRD(max_iter=1, learning_rate=1e-8, **kw).fit(X, y)
    est = JRD(max_iter=20, **kw).fit(X, y)
    hist = losses(est)
    assert np.all(np.isfinite(hist)) and hist[-1] < hist[0]
    if solver == "conjugate_gradient":
        assert np.all(np.diff(hist) <= 1e-6 * np.abs(hist[:-1]) + 1e-7)
    # the full-data objective, recomputed from components_, bias_ and proxies_, decreased too
    assert _objective(est, X, y) < _objective(start, X, y) - 0.1


@pytest.mark.parametrize("solver", ["adam", "conjugate_gradient"])
@pytest.mark.parametrize("manifold", ["stiefel", "euclidean"])
def test_manifolds_and_learned_proxies(solver, manifold):
    X, y = _data()
    est = JRD(n_components=3, solver=solver, manifold=manifold, max_iter=15,
              learning_rate=0.01, early_stopping=False, neighbor_weight=0.0,
              random_state=0).fit(X, y)
    gram = est.components_ @ est.components_.T
    if manifold == "stiefel":
        np.testing.assert_allclose(gram, np.eye(3), atol=1e-8)
    assert est.bias_.shape == (3,) and est.proxies_.shape == (4, 3)
    np.testing.assert_allclose(np.linalg.norm(est.proxies_, axis=1), 1.0, atol=1e-12)
    # the proxies classify the training embedding normalize(X W + b): bias_ and proxies_
    # are consistent with components_ in input coordinates
    E = est.transform(X) + est.bias_
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    assert np.mean(est.classes_[np.argmax(E @ est.proxies_.T, axis=1)] == y) > 0.9


def test_bias_folding_with_pca_reduction():
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 20)
    X = rng.randn(80, 300) + 6.0 * np.eye(4, 300)[y] + 3.0  # offset: the mean matters
    est = JRD(n_components=3, n_reduce=10, manifold="stiefel", max_iter=30,
              neighbor_weight=0.0, random_state=0).fit(X, y)
    assert est.components_.shape == (3, 300)
    np.testing.assert_allclose(est.components_ @ est.components_.T, np.eye(3), atol=1e-8)
    E = est.transform(X) + est.bias_
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    assert np.mean(np.argmax(E @ est.proxies_.T, axis=1) == y) > 0.9


def test_jrs_weight_changes_the_solution_and_jrs_decreases():
    from skdml.losses import JRSRegularizer

    X, y = _data()
    kw = dict(n_components=3, solver="conjugate_gradient", max_iter=30, neighbor_weight=0.0,
              random_state=0)
    plain = JRD(regularizer_weight=0.0, **kw).fit(X, y)
    reg = JRD(regularizer_weight=5.0, **kw).fit(X, y)
    assert not np.allclose(plain.components_, reg.components_)

    def jrs(est):
        E = torch.nn.functional.normalize(torch.tensor(est.transform(X) + est.bias_), dim=1)
        cos = E @ torch.tensor(est.proxies_).T
        return float(JRSRegularizer()([torch.tensor(X - X.mean(0)), E, cos], torch.tensor(y)))

    assert jrs(reg) < jrs(plain)


@pytest.mark.parametrize("init", ["pca", "lda", "identity", "random"])
def test_init_options(init):
    X, y = _data()
    assert JRD(n_components=3, init=init, max_iter=2).fit(X, y).components_.shape == (3, 10)


def test_init_array_checked():
    X, y = _data()
    with pytest.raises(ValueError, match="shape"):
        JRD(init=np.eye(2, 4)).fit(X, y)
    A = np.eye(2, 10)
    est = JRD(init=A, max_iter=1, learning_rate=1e-8, random_state=0).fit(X, y)
    np.testing.assert_allclose(est.components_, A, atol=1e-5)


@pytest.mark.parametrize("solver", ["adam", "conjugate_gradient"])
def test_random_state_reproducible(solver):
    X, y = _data()
    kw = dict(n_components=3, solver=solver, max_iter=5)
    a = JRD(random_state=0, **kw).fit(X, y)
    b = JRD(random_state=0, **kw).fit(X, y)
    np.testing.assert_array_equal(a.components_, b.components_)
    np.testing.assert_array_equal(a.proxies_, b.proxies_)


def test_clear_errors():
    X, y = _data()
    with pytest.raises(ValueError, match="at least 2 classes"):
        JRD().fit(X, np.ones(len(X)))
    y_one = y.copy()
    y_one[5] = 7
    with pytest.raises(ValueError, match="only 1 sample"):
        JRD().fit(X, y_one)
    X_nan = X.copy()
    X_nan[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        JRD().fit(X_nan, y)
    with pytest.raises(ValueError, match="n_components"):
        JRD(n_components=20).fit(X, y)
    with pytest.raises(ValueError, match="margin"):
        JRD(margin=1.5).fit(X, y)


def test_convergence_warning_and_string_labels():
    X, y = _data()
    labels = np.array(["a", "b", "c", "d"])[y]
    with pytest.warns(ConvergenceWarning):
        est = JRD(n_components=3, max_iter=1, early_stopping=False,
                  random_state=0).fit(X, labels)
    assert list(est.classes_) == ["a", "b", "c", "d"] and est.n_iter_ == 1


def test_grid_search_jrs_weight_with_recall_scorer():
    from skdml.metrics import recall_at_k_scorer
    from skdml.model_selection import ClassDisjointSplit

    X, y = _data(n_samples=160, n_classes=8, n_features=8)
    search = GridSearchCV(JRD(n_components=3, max_iter=3, random_state=0),
                          {"regularizer_weight": [0.0, 1.0], "margin": [0.05, 0.1]},
                          cv=ClassDisjointSplit(n_splits=2, random_state=0),
                          scoring=recall_at_k_scorer(1)).fit(X, y)
    assert set(search.best_params_) == {"regularizer_weight", "margin"}
    assert 0.0 <= search.best_score_ <= 1.0


def test_early_stopping_refits_for_the_best_epoch_count():
    X, y = _data(n_samples=200)
    est = JRD(n_components=3, early_stopping=True, validation_fraction=0.2, max_iter=40,
              random_state=0).fit(X, y)
    scores = np.array([h["validation_score"] for h in est.history_ if "validation_score" in h])
    best_epoch = len(scores) - int(np.argmax(scores[::-1]))  # the latest of the best epochs
    assert est.best_iteration_ == best_epoch == est.n_iter_
    again = JRD(n_components=3, early_stopping=True, validation_fraction=0.2,
                max_iter=best_epoch, random_state=0).fit(X, y)
    np.testing.assert_allclose(again.components_, est.components_, atol=1e-6)
    np.testing.assert_allclose(again.bias_, est.bias_, atol=1e-6)


def _knn_accuracy(est, X, y, k):
    pipe = make_pipeline(est, KNeighborsClassifier(k)).fit(X[:200], y[:200])
    return pipe.score(X[200:], y[200:])


def test_default_learns_for_knn_against_its_start():
    # 2 informative features under 18 louder noisy ones: the PCA start keeps the noise
    # (standardised, as standardize="auto" chooses here, they are as loud as the noise: the
    # start rises from 0.37 to 0.78, and learning must still add to it; measured 0.98)
    X, y = _two_informative(n_samples=300, seed=1)
    pca_start = _knn_accuracy(JRD(max_iter=0, standardize=False, random_state=0), X, y, 10)
    own_start = _knn_accuracy(JRD(max_iter=0, random_state=0), X, y, 10)
    learned = _knn_accuracy(JRD(random_state=0), X, y, 10)
    assert learned > pca_start + 0.25, (pca_start, learned)
    assert learned > own_start + 0.1, (own_start, learned)


def test_neighbor_weight_chosen_on_the_training_hold_out():
    X, y = _two_informative(n_samples=300, seed=1)
    est = JRD(random_state=0).fit(X, y)
    # both candidates ran on the stratified hold-out of the training data; the better is kept
    assert est.validation_split_ == "stratified"
    assert set(est.candidate_scores_) == {0.0, 1.0}
    assert est.neighbor_weight_ in est.candidate_scores_
    if est.best_iteration_ > 0:
        assert est.best_validation_score_ == max(est.candidate_scores_.values())
        assert est.candidate_scores_[est.neighbor_weight_] == est.best_validation_score_
    # the chosen run's history is the one returned, with the neighbour term when chosen
    has_term = any("neighbor_loss" in h for h in est.history_)
    assert has_term == (est.neighbor_weight_ > 0)
    # a fixed weight makes no choice, in either task
    fixed = JRD(neighbor_weight=1.0, max_iter=5, random_state=0).fit(X, y)
    assert fixed.neighbor_weight_ == 1.0 and not hasattr(fixed, "candidate_scores_")
    paper = JRD(neighbor_weight=0.0, validation_split="class_disjoint", max_iter=5,
                random_state=0).fit(X, y)
    assert paper.neighbor_weight_ == 0.0 and not hasattr(paper, "candidate_scores_")
    assert not any("neighbor_loss" in h for h in paper.history_)


def test_unseen_class_task_keeps_the_paper_objective_with_few_held_out_classes():
    # 12 classes hold out 2: too few to choose on, so the task's own objective, no choice
    X, y = _two_informative(n_samples=300, seed=1)
    y = y * 3 + np.random.RandomState(0).randint(0, 3, len(y))
    est = JRD(validation_split="class_disjoint", max_iter=5, random_state=0).fit(X, y)
    assert est.neighbor_weight_ == 0.0 and not hasattr(est, "candidate_scores_")
    assert not any("neighbor_loss" in h for h in est.history_)


def test_neighbor_term_is_lmnn_on_the_transformed_space():
    from skdml.linear._jrd import _JRDObjective
    from skdml.losses import LMNNLoss

    X, y = _data()
    X_t, y_t = torch.tensor(X, dtype=torch.float32), torch.tensor(y)
    est = JRD(n_components=3, neighbor_weight=0.0)
    paper = _JRDObjective(3, 10, est._build_objective(4, 3), neighbor_weight=0.0)
    both = _JRDObjective(3, 10, est._build_objective(4, 3), neighbor_weight=2.5)
    L = torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for obj in (paper, both):
            obj.L.copy_(L)
            obj.init_extras(X_t, y_t)
    total0, _ = paper(X_t, y_t)
    total, terms = both(X_t, y_t)
    expected = LMNNLoss()(X_t @ L.T, y_t)
    torch.testing.assert_close(terms["neighbor_loss"], expected)
    torch.testing.assert_close(total, total0 + 2.5 * expected)
    with pytest.raises(ValueError, match="neighbor_weight"):
        JRD(neighbor_weight=-1.0).fit(X, y)
